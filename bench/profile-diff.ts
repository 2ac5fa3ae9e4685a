/**
 * Where Gantry's CPU goes beyond the bare proxy's, function by function. Starts the fake upstream, the
 * bare proxy and the compiled Gantry (no limits, a free model, the start script's node flags), both
 * proxies under `--cpu-prof`, drives the same non-streaming load at each in alternating rounds, and prints
 * the event loop's self time per request of every function, for each proxy and the difference, counting
 * only samples taken while that proxy was under load (start-up, warm-up and idle time left out).
 *
 * usage: npm run bench:diff -- [--concurrency 32] [--requests 30000] [--rounds 3] [--top 40]
 *                              [--compare-bin /other/checkout/bin/gantry.js] [--bin bin/gantry.js]
 *
 * `--bin` runs another build than this checkout's as `gantry`. With --compare-bin (an A/B of two builds,
 * e.g. one from before a regression), a second Gantry (`gantry-b`, same config and flags) takes its turn
 * in every round too, and the output adds, for each Gantry, the process's CPU per request (from /proc,
 * all threads, and its main thread's), the event loop's and the ledger thread's profiled time per
 * request (the thread that writes usage records: its SQLite work never shows in the event loop's
 * profile), then the functions of both threads by their difference between the two (by name and file:
 * the builds' line numbers differ).
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
import { type Child, ORPHAN_GUARD, readCpuMs, startChild, stopAll, stopChild } from './lib/children.js';
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
    bin: { type: 'string' },
    'compare-bin': { type: 'string' },
  },
});
const concurrency = positive('concurrency');
const requests = positive('requests');
const rounds = positive('rounds');
const top = positive('top');

const compareBin = values['compare-bin'];

function positive(name: 'concurrency' | 'requests' | 'rounds' | 'top'): number {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name}: a positive integer`);
  return n;
}

type Proxy = 'bare' | 'gantry' | 'gantry-b';
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
  /** The proxy process's CPU time (all threads) used in the window, ms. */
  cpuMs: number;
  /** Its main thread's (the event loop's), ms. */
  mainCpuMs: number;
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n);

async function main(): Promise<void> {
  rmSync(dir, { recursive: true, force: true });
  const proxies: Proxy[] = compareBin ? ['bare', 'gantry', 'gantry-b'] : ['bare', 'gantry'];
  for (const proxy of proxies) mkdirSync(profileDir(proxy), { recursive: true });
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
  const startGantry = (proxy: 'gantry' | 'gantry-b', bin: string) =>
    startGantryChild({
      name: proxy,
      cwd: ROOT,
      nodeFlags: [...gantryNodeFlags(join(ROOT, 'package.json')), '--import', ORPHAN_GUARD, ...prof(proxy)],
      bin,
      config,
      env: process.env,
      dataDir: join(dir, `data-${proxy}`),
      apiKey: API_KEY,
    });
  const children = {
    bare,
    gantry: await startGantry('gantry', values.bin ?? join(ROOT, 'bin', 'gantry.js')),
    ...(compareBin ? { 'gantry-b': await startGantry('gantry-b', compareBin) } : {}),
  } as Record<Proxy, Child>;

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
  const targets = Object.fromEntries(
    proxies.map((proxy) => [
      proxy,
      createDispatcher(`http://127.0.0.1:${children[proxy].port}`, concurrency),
    ]),
  ) as Record<Proxy, ReturnType<typeof createDispatcher>>;
  const windows: Record<Proxy, Window[]> = { bare: [], gantry: [], 'gantry-b': [] };
  const plan = (n: number) => ({ kind: 'count' as const, concurrency, warmup: 0, requests: n });
  for (const proxy of proxies) await drive(targets[proxy], spec, plan(requests / 2));
  for (let round = 0; round < rounds; round++) {
    // Each proxy first in turn, so a burst of machine load does not always land on the same one.
    const order = proxies.map((_, i) => proxies[(round + i) % proxies.length] as Proxy);
    for (const proxy of order) {
      const fromUs = nowUs();
      const { pid } = children[proxy];
      const cpuFrom = readCpuMs(pid);
      const mainFrom = readCpuMs(pid, pid);
      const result = await drive(targets[proxy], spec, plan(requests));
      const cpuMs = readCpuMs(pid) - cpuFrom;
      const mainCpuMs = readCpuMs(pid, pid) - mainFrom;
      windows[proxy].push({ fromUs, toUs: nowUs(), requests: result.completedAll, cpuMs, mainCpuMs });
      if (result.errors > 0) throw new Error(`${proxy}: ${result.errorSamples.join('; ')}`);
      const rps = Math.round((result.completed / result.windowMs) * 1000);
      const cpu = Math.round((cpuMs * 1000) / result.completedAll);
      process.stderr.write(`round ${round + 1}/${rounds} ${proxy}: ${rps} req/s, ${cpu} CPU µs/req\n`);
    }
  }
  await Promise.all(proxies.map((proxy) => targets[proxy].close()));
  // SIGTERM: they write their profiles as they exit.
  await Promise.all(proxies.map((proxy) => stopChild(children[proxy])));
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
  if (compareBin) compareGantrys(windows, top);
  rmSync(dir, { recursive: true, force: true });
}

/**
 * gantry (this checkout) against gantry-b (--compare-bin): CPU per request of the whole process, of the
 * event loop and of the ledger thread, then the functions of both threads by their difference.
 */
function compareGantrys(windows: Record<Proxy, Window[]>, top: number): void {
  const both = ['gantry', 'gantry-b'] as const;
  const cost = Object.fromEntries(
    both.map((proxy) => {
      const files = profiles(profileDir(proxy));
      const ledgerFile = files.find((file) => readFileSync(file, 'utf8').includes('ledger-worker'));
      const served = windows[proxy].reduce((sum, w) => sum + w.requests, 0);
      const cpuMs = windows[proxy].reduce((sum, w) => sum + w.cpuMs, 0);
      const mainCpuMs = windows[proxy].reduce((sum, w) => sum + w.mainCpuMs, 0);
      return [
        proxy,
        {
          process: (cpuMs * 1000) / served,
          main: (mainCpuMs * 1000) / served,
          perRound: windows[proxy].map((w) => Math.round((w.cpuMs * 1000) / w.requests)),
          loop: withoutLines(perRequest(largestProfile(profileDir(proxy)), windows[proxy])),
          ledger: withoutLines(ledgerFile ? perRequest(ledgerFile, windows[proxy]) : new Map()),
        },
      ];
    }),
  ) as Record<
    (typeof both)[number],
    { process: number; main: number; perRound: number[]; loop: Costs; ledger: Costs }
  >;
  const sum = (m: Costs) => [...m.values()].reduce((a, b) => a + b, 0);
  const a = cost.gantry;
  const b = cost['gantry-b'];
  const f = (n: number) => n.toFixed(2).padStart(8);
  const line = (what: string, x: number, y: number) =>
    `${what.padEnd(36)} ${f(x)} ${f(y)} ${f(x - y).padStart(9)}\n`;
  const diffRows = (thread: string, x: Costs, y: Costs) =>
    [...new Set([...x.keys(), ...y.keys()])].map((fn) => ({
      fn: `[${thread}] ${fn}`,
      a: x.get(fn) ?? 0,
      b: y.get(fn) ?? 0,
    }));
  const rows = [...diffRows('loop', a.loop, b.loop), ...diffRows('ledger', a.ledger, b.ledger)]
    .sort((p, q) => Math.abs(q.a - q.b) - Math.abs(p.a - p.b))
    .slice(0, top);
  process.stdout.write(
    `\nGantry (${values.bin ?? 'this checkout'}) against gantry-b (${compareBin}), µs per request:\n\n` +
      `${''.padEnd(36)} ${'Gantry'.padStart(8)} ${'gantry-b'.padStart(8)} ${'difference'.padStart(9)}\n` +
      line('process CPU (/proc, all threads)', a.process, b.process) +
      `${'  per round'.padEnd(36)} ${a.perRound.join(' / ')}  vs  ${b.perRound.join(' / ')}\n` +
      line('  main thread CPU (/proc)', a.main, b.main) +
      line('  other threads CPU (ledger, GC, libuv)', a.process - a.main, b.process - b.main) +
      line('event loop (profiled, not idle)', sum(a.loop), sum(b.loop)) +
      line('ledger thread (profiled, not idle)', sum(a.ledger), sum(b.ledger)) +
      `\n${'Gantry'.padStart(8)} ${'gantry-b'.padStart(8)} ${'difference'.padStart(9)}  function\n` +
      rows.map((r) => `${f(r.a)} ${f(r.b)} ${f(r.a - r.b).padStart(9)}  ${r.fn}`).join('\n') +
      '\n',
  );
}

type Costs = Map<string, number>;

/** By function and file only: two builds number their lines differently. */
function withoutLines(costs: Costs): Costs {
  const out: Costs = new Map();
  for (const [fn, us] of costs) {
    const key = fn.replace(/:\d+$/, '');
    out.set(key, (out.get(key) ?? 0) + us);
  }
  return out;
}

function profiles(directory: string): string[] {
  return readdirSync(directory)
    .filter((name) => name.endsWith('.cpuprofile'))
    .map((name) => join(directory, name));
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
