/**
 * Where Gantry's CPU goes beyond the bare proxy's, function by function. Starts the fake upstream, the
 * bare proxy and the compiled Gantry (no limits, a free model, the start script's node flags), both
 * proxies under `--cpu-prof`, drives the same non-streaming load at each in alternating rounds, and prints
 * the event loop's self time per request of every function, for each proxy and the difference, counting
 * only samples taken while that proxy was under load (start-up, warm-up and idle time left out).
 *
 * usage: npm run bench:diff -- [--concurrency 32] [--requests 30000] [--rounds 3] [--top 40]
 *
 * A function's time is what the profiler saw on the stack top: on a loaded 2-core machine that includes
 * the moments the thread was descheduled there (e.g. right after waking another thread), so read small
 * differences with care.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ORPHAN_GUARD, startChild, stopAll, stopChild } from './lib/children.js';
import { gantryNodeFlags } from './lib/env.js';
import { startGantryChild } from './lib/gantry-child.js';
import { createDispatcher, drive, type RequestSpec } from './lib/load.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const { values } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '32' },
    requests: { type: 'string', default: '30000' },
    rounds: { type: 'string', default: '3' },
    top: { type: 'string', default: '40' },
  },
});
const concurrency = positive('concurrency');
const requests = positive('requests');
const rounds = positive('rounds');
const top = positive('top');

function positive(name: keyof typeof values): number {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name}: a positive integer`);
  return n;
}

type Proxy = 'bare' | 'gantry';
const MODEL = 'bench/chat';
const API_KEY = `gty_diff_${randomBytes(24).toString('base64url')}`;
const dir = join(tmpdir(), `gantry-profile-diff-${process.pid}`);
const profileDir = (proxy: Proxy) => join(dir, `${proxy}-profiles`);

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
}
/** A load window on the shared monotonic clock (µs, as V8's profile timestamps) and its requests. */
interface Window {
  fromUs: number;
  toUs: number;
  requests: number;
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n);

async function main(): Promise<void> {
  rmSync(dir, { recursive: true, force: true });
  for (const proxy of ['bare', 'gantry'] as const) mkdirSync(profileDir(proxy), { recursive: true });
  const upstream = await startChild({
    name: 'upstream',
    args: ['--import', 'tsx', 'bench/upstream.ts'],
    cwd: ROOT,
    ready: 'ipc',
  });
  // Each thread writes its own profile into the directory (tsx's loader thread, Gantry's ledger thread
  // too); the event loop's is the largest.
  const prof = (proxy: Proxy) => ['--cpu-prof', '--cpu-prof-dir', profileDir(proxy)];
  const bare = await startChild({
    name: 'bare',
    args: [
      '--import',
      'tsx',
      ...prof('bare'),
      'bench/bare-proxy.ts',
      '--upstream',
      `http://127.0.0.1:${upstream.port}`,
    ],
    cwd: ROOT,
    ready: 'ipc',
  });
  const config = join(dir, 'gantry.yaml');
  writeFileSync(
    config,
    [
      'server: { host: 127.0.0.1, port: 0, log_level: warn }',
      'providers:',
      `  up: { kind: openai, base_url: "http://127.0.0.1:${upstream.port}/v1", max_connections: 128 }`,
      'tiers:',
      '  default: {}',
      'models:',
      `  - { namespace: ${MODEL}, name: Bench chat, type: text, apis: [chat], routes: [{ provider: up, model: ${MODEL} }] }`,
      '',
    ].join('\n'),
  );
  const gantry = await startGantryChild({
    name: 'gantry',
    cwd: ROOT,
    nodeFlags: [...gantryNodeFlags(join(ROOT, 'package.json')), '--import', ORPHAN_GUARD, ...prof('gantry')],
    bin: join(ROOT, 'bin', 'gantry.js'),
    config,
    env: process.env,
    dataDir: join(dir, 'data'),
    apiKey: API_KEY,
  });

  const spec: RequestSpec = {
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
    body: Buffer.from(
      JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'Write a haiku about load balancers.' }],
        max_tokens: 256,
      }),
    ),
    stream: false,
  };
  const targets = {
    bare: createDispatcher(`http://127.0.0.1:${bare.port}`, concurrency),
    gantry: createDispatcher(`http://127.0.0.1:${gantry.port}`, concurrency),
  };
  const windows: Record<Proxy, Window[]> = { bare: [], gantry: [] };
  const plan = (n: number) => ({ kind: 'count' as const, concurrency, warmup: 0, requests: n });
  for (const proxy of ['bare', 'gantry'] as const) await drive(targets[proxy], spec, plan(requests / 2));
  for (let round = 0; round < rounds; round++) {
    const order: Proxy[] = round % 2 === 0 ? ['bare', 'gantry'] : ['gantry', 'bare'];
    for (const proxy of order) {
      const fromUs = nowUs();
      const result = await drive(targets[proxy], spec, plan(requests));
      windows[proxy].push({ fromUs, toUs: nowUs(), requests: result.completedAll });
      if (result.errors > 0) throw new Error(`${proxy}: ${result.errorSamples.join('; ')}`);
      const rps = Math.round((result.completed / result.windowMs) * 1000);
      process.stderr.write(`round ${round + 1}/${rounds} ${proxy}: ${rps} req/s\n`);
    }
  }
  await Promise.all([targets.bare.close(), targets.gantry.close()]);
  // SIGTERM: both write their profiles as they exit.
  await Promise.all([stopChild(gantry), stopChild(bare)]);
  await stopAll();

  const bareCost = perRequest(largestProfile(profileDir('bare')), windows.bare);
  const gantryCost = perRequest(largestProfile(profileDir('gantry')), windows.gantry);
  const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
  const rows = [...new Set([...bareCost.keys(), ...gantryCost.keys()])]
    .map((fn) => ({ fn, bare: bareCost.get(fn) ?? 0, gantry: gantryCost.get(fn) ?? 0 }))
    .sort((a, b) => Math.abs(b.gantry - b.bare) - Math.abs(a.gantry - a.bare))
    .slice(0, top);
  const f = (n: number) => n.toFixed(2).padStart(7);
  process.stdout.write(
    `\nEvent loop self time per request (µs), c=${concurrency}, ${rounds} x ${requests} requests each: ` +
      `bare ${total(bareCost).toFixed(1)}, Gantry ${total(gantryCost).toFixed(1)}\n\n` +
      `${'Gantry-bare'.padStart(11)} ${'bare'.padStart(7)} ${'Gantry'.padStart(7)}  function\n` +
      rows
        .map((r) => `${f(r.gantry - r.bare).padStart(11)} ${f(r.bare)} ${f(r.gantry)}  ${r.fn}`)
        .join('\n') +
      '\n',
  );
  rmSync(dir, { recursive: true, force: true });
}

function largestProfile(directory: string): string {
  const files = readdirSync(directory)
    .filter((name) => name.endsWith('.cpuprofile'))
    .map((name) => join(directory, name));
  if (files.length === 0) throw new Error(`no profile written in ${directory}`);
  return files.reduce((a, b) => (statSync(a).size >= statSync(b).size ? a : b));
}

/** Self µs per request by function, from the samples inside the load windows. */
function perRequest(file: string, windows: readonly Window[]): Map<string, number> {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const served = windows.reduce((sum, w) => sum + w.requests, 0);
  const out = new Map<string, number>();
  let at = profile.startTime;
  for (let i = 1; i < profile.samples.length; i++) {
    // timeDeltas[i] is the time since sample i-1, spent where sample i-1 was taken.
    const delta = profile.timeDeltas[i] ?? 0;
    at += delta;
    if (!windows.some((w) => at >= w.fromUs && at <= w.toUs)) continue;
    const frame = nodes.get(profile.samples[i - 1] as number)?.callFrame;
    if (!frame || frame.functionName === '(idle)') continue;
    const where = frame.url
      .replace(/^.*\/node_modules\//, '')
      .replace(/^file:\/\/.*?\/(dist|bench)\//, '$1/')
      .replace(/^file:\/\//, '');
    const fn = `${frame.functionName || '(anonymous)'} ${where}${where ? `:${frame.lineNumber + 1}` : ''}`;
    out.set(fn, (out.get(fn) ?? 0) + delta / served);
  }
  return out;
}

main().catch(async (err: unknown) => {
  process.stderr.write(`profile-diff: ${err instanceof Error ? err.message : String(err)}\n`);
  await stopAll();
  process.exitCode = 1;
});
