/**
 * The safety lane of `npm run bench` (BENCH_PHASES=safety): what the safety layer adds to a chat
 * completion, measured the same way in the same run as the same model without it.
 *
 * Its own children: the fake OpenAI-compatible upstream (bench/upstream.ts) and one compiled Gantry with
 * three models routed to it: `bench/plain` (no `safety` field, so the default `off`), `bench/off`
 * (`safety: off` named) and `bench/annotate` (`safety: annotate`: the prompt and the answer are checked
 * by the built-in offline classifier and the results added). Four targets, in rotating order round by
 * round: `direct` (the fake itself) and the three models through Gantry.
 *
 * Requests: a system message and a user message of about 1 KB of ordinary prose (nothing any category
 * flags), non-streamed, and streamed as BENCH_CHUNKS content chunks (32). Figures: latency at c=1 (p50,
 * p99), time to first content for streams, throughput at c=32, Gantry's CPU per request. "annotate
 * adds" is gantry-annotate's p50, p99 and CPU minus gantry-plain's; "off adds" the same for gantry-off,
 * which should be noise only (with policy off nothing of the safety layer runs on the request path).
 *
 * A sanity check reads the annotate answer: without `prompt_filter_results` the Gantry under test does
 * not check chat prompts yet, and the lane says so loudly (its figures then measure nothing of safety).
 * Beside the HTTP figures, the lane times the checks themselves in its own process (this checkout's
 * src/safety, the built-in offline classifier under `annotate`): the 1 KB prompt, and the fake's answer
 * as one completion check, which is the floor of what annotate can add per request.
 *
 * Settings: BENCH_SAFETY_REQUESTS (c=1 requests per target and round, 1000; quick 300), BENCH_SAFETY_MS
 * (c=32 window per target and round, 1500; quick 800), and run.ts's BENCH_ROUNDS, BENCH_CHUNKS,
 * BENCH_GANTRY_BIN, --quick.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'undici';
import { checkCompletion, checkPrompt } from '../src/safety/engine.js';
import { offlineClassifier } from '../src/safety/offline/index.js';
import { PRESET_POLICIES } from '../src/safety/policy.js';
import { type Child, ORPHAN_GUARD, readCpuMs, startChild, stopChild } from './lib/children.js';
import { envInt, gantryNodeFlags } from './lib/env.js';
import { startGantryChild } from './lib/gantry-child.js';
import { createDispatcher, drive, type PhaseResult, type Plan, type RequestSpec } from './lib/load.js';
import { round3, type Summary, summarize } from './lib/stats.js';
import { int0, table } from './lib/table.js';

export interface SafetyLaneOptions {
  root: string;
  quick: boolean;
  rounds: number;
  chunks: number;
  gantryBin: string;
  log: (message: string) => void;
}

export interface SafetyLaneResult {
  /** The lane's tables, ready to print. */
  text: string;
  json: Record<string, unknown>;
  errors: string[];
}

type LaneTarget = 'direct' | 'gantry-plain' | 'gantry-off' | 'gantry-annotate';

interface Target {
  name: LaneTarget;
  origin: string;
  /** The Gantry process (CPU per request), for the Gantry targets. */
  gantry?: Child;
  json: RequestSpec;
  stream: RequestSpec;
  pools: Map<number, Pool>;
}

interface LanePhase {
  id: string;
  stream: boolean;
  plan: Plan;
}

interface Measured {
  result: PhaseResult;
  cpuMs: number;
}

const API_KEY = `gty_bench_${randomBytes(24).toString('base64url')}`;
const SYSTEM = 'You are a concise assistant. Answer in one short paragraph.';
/** About 1 KB of ordinary text: the size the added-latency target is set for. */
const PARAGRAPH =
  'Our team is planning a small garden behind the office this spring. We would like raised beds for ' +
  'tomatoes, basil and lettuce, a bench in the shade, and a path of crushed stone that stays dry after ' +
  'rain. The soil is heavy clay, the yard faces south, and there is a tap by the back door. ';
const USER = `${PARAGRAPH.repeat(Math.ceil(1024 / PARAGRAPH.length)).slice(0, 1000)} What should we plant first?`;

function chatSpec(model: string, stream: boolean): RequestSpec {
  const body = {
    model,
    messages: [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: USER },
    ],
    temperature: 0.7,
    max_tokens: 256,
    ...(stream ? { stream: true } : {}),
  };
  return {
    path: '/v1/chat/completions',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json',
      authorization: `Bearer ${API_KEY}`,
      'user-agent': 'gantry-bench/0.1',
    },
    body: Buffer.from(JSON.stringify(body)),
    stream,
  };
}

function gantryYaml(upstreamPort: number): string {
  const model = (namespace: string, safety: string) => `
  - namespace: ${namespace}
    name: ${namespace}
    type: text
    apis: [chat]
    routes: [{ provider: bench-openai, model: ${namespace} }]${safety}`;
  return `# Written by bench/safety.ts for one run.
server:
  host: 127.0.0.1
  port: 0
  log_level: warn
providers:
  bench-openai:
    kind: openai
    base_url: http://127.0.0.1:${upstreamPort}/v1
    max_connections: 128
tiers:
  default: {}
models:${model('bench/plain', '')}${model('bench/off', '\n    safety: off')}${model('bench/annotate', '\n    safety: annotate')}
`;
}

async function post(pool: Pool, spec: RequestSpec): Promise<{ status: number; text: string }> {
  const res = await pool.request({ method: 'POST', path: spec.path, headers: spec.headers, body: spec.body });
  return { status: res.statusCode, text: await res.body.text() };
}

/** One JSON and one streamed request per target, checked, so no target wins by failing. */
async function sanityCheck(target: Target): Promise<void> {
  const pool = new Pool(target.origin, { connections: 1 });
  try {
    const j = await post(pool, target.json);
    if (j.status !== 200) throw new Error(`${target.name}: HTTP ${j.status}: ${j.text.slice(0, 300)}`);
    const s = await post(pool, target.stream);
    if (s.status !== 200) throw new Error(`${target.name}: stream HTTP ${s.status}: ${s.text.slice(0, 300)}`);
    if (!s.text.endsWith('data: [DONE]\n\n')) throw new Error(`${target.name}: stream does not end properly`);
    if (target.name !== 'gantry-annotate' && j.text.includes('prompt_filter_results'))
      throw new Error(`${target.name}: safety results in an answer whose policy is off`);
  } finally {
    await pool.close();
  }
}

/** Does this Gantry check chat prompts under `annotate` (Azure's prompt_filter_results in the answer)? */
async function annotates(target: Target): Promise<boolean> {
  const pool = new Pool(target.origin, { connections: 1 });
  try {
    return (await post(pool, target.json)).text.includes('"prompt_filter_results"');
  } finally {
    await pool.close();
  }
}

export async function runSafetyLane(options: SafetyLaneOptions): Promise<SafetyLaneResult> {
  const { log, root } = options;
  const requests = envInt('BENCH_SAFETY_REQUESTS', options.quick ? 300 : 1_000, 10);
  const windowMs = envInt('BENCH_SAFETY_MS', options.quick ? 800 : 1_500, 100, 600_000);
  const errors: string[] = [];
  const tempDir = mkdtempSync(join(tmpdir(), 'gantry-bench-safety-'));
  const started: Child[] = [];
  const pools: Pool[] = [];
  try {
    const upstream = await startChild({
      name: 'upstream',
      args: ['--import', 'tsx', 'bench/upstream.ts', '--chunks', String(options.chunks)],
      cwd: root,
      ready: 'ipc',
    });
    started.push(upstream);
    const config = join(tempDir, 'gantry.yaml');
    writeFileSync(config, gantryYaml(upstream.port));
    const { GANTRY_CONFIG: _ignored, REDIS_URL: _ignoredToo, ...inherited } = process.env;
    const gantry = await startGantryChild({
      name: 'gantry-safety-lane',
      cwd: root,
      nodeFlags: [...gantryNodeFlags(join(root, 'package.json')), '--import', ORPHAN_GUARD],
      bin: options.gantryBin,
      config,
      env: inherited,
      dataDir: join(tempDir, 'data'),
      apiKey: API_KEY,
    });
    started.push(gantry);
    const gantryOrigin = `http://127.0.0.1:${gantry.port}`;

    const target = (name: LaneTarget, origin: string, model: string): Target => ({
      name,
      origin,
      ...(name.startsWith('gantry') ? { gantry } : {}),
      json: chatSpec(model, false),
      stream: chatSpec(model, true),
      pools: new Map(),
    });
    const targets: Target[] = [
      target('direct', `http://127.0.0.1:${upstream.port}`, 'bench/plain'),
      target('gantry-plain', gantryOrigin, 'bench/plain'),
      target('gantry-off', gantryOrigin, 'bench/off'),
      target('gantry-annotate', gantryOrigin, 'bench/annotate'),
    ];
    for (const t of targets) await sanityCheck(t);
    const active = await annotates(targets[3] as Target);
    const note = active
      ? 'annotate checks the prompt (prompt_filter_results in the answer)'
      : 'this Gantry does not check chat prompts yet: no prompt_filter_results under annotate';
    if (!active)
      process.stdout.write(`\n!!!\n!!! safety lane: ${note}; its figures measure nothing of safety\n!!!\n\n`);
    log(
      `safety lane: ${note}; ${USER.length}-char prompt, ${options.chunks}-chunk streams, gantry :${gantry.port}`,
    );

    const phases: LanePhase[] = [
      { id: 'json-c1', stream: false, plan: { kind: 'count', concurrency: 1, warmup: 100, requests } },
      {
        id: 'stream-c1',
        stream: true,
        plan: { kind: 'count', concurrency: 1, warmup: 50, requests: Math.ceil(requests / 2) },
      },
      {
        id: 'json-c32',
        stream: false,
        plan: { kind: 'time', concurrency: 32, warmupMs: 300, durationMs: windowMs },
      },
    ];
    const runs = new Map<string, Map<LaneTarget, Measured[]>>();
    for (let round = 0; round < options.rounds; round++) {
      for (const phase of phases) {
        const order = targets.map((_, i) => targets[(i + round) % targets.length] as Target);
        for (const t of order) {
          let pool = t.pools.get(phase.plan.concurrency);
          if (!pool) {
            pool = createDispatcher(t.origin, phase.plan.concurrency);
            t.pools.set(phase.plan.concurrency, pool);
            pools.push(pool);
          }
          const cpu0 = t.gantry ? readCpuMs(t.gantry.pid) : 0;
          const result = await drive(pool, phase.stream ? t.stream : t.json, phase.plan);
          const cpuMs = t.gantry ? readCpuMs(t.gantry.pid) - cpu0 : 0;
          if (result.errors > 0) {
            errors.push(`${t.name} ${phase.id}: ${result.errors} errors (${result.errorSamples.join('; ')})`);
          }
          const byTarget = runs.get(phase.id) ?? new Map<LaneTarget, Measured[]>();
          runs.set(phase.id, byTarget);
          byTarget.set(t.name, [...(byTarget.get(t.name) ?? []), { result, cpuMs }]);
        }
      }
      log(`safety lane: round ${round + 1}/${options.rounds} done`);
    }
    const inProcess = await timeChecks(options.quick ? 2_000 : 10_000);
    return report(runs, phases, note, active, options.chunks, errors, inProcess);
  } finally {
    await Promise.all(pools.map((p) => p.destroy().catch(() => undefined)));
    for (const child of started.reverse()) await stopChild(child).catch(() => undefined);
    rmSync(tempDir, { recursive: true, force: true });
  }
}

interface CheckTimes {
  prompt: Summary;
  completion: Summary;
}

/** The answer bench/upstream.ts streams (its REPLY), as one completion text. */
const ANSWER =
  'Packets queue at the gate, one hand spreads them evenly, no server stands alone. ' +
  'Health checks hum softly, the slow node steps aside, traffic flows like rain.';

/** Each check `count` times after a warm-up, in this process: microseconds per check. */
async function timeChecks(count: number): Promise<CheckTimes> {
  const active = {
    policy: PRESET_POLICIES.annotate as (typeof PRESET_POLICIES)[string],
    classifier: offlineClassifier(),
    onFailure: 'open' as const,
  };
  const parts = [
    { text: SYSTEM, source: 'prompt' as const },
    { text: USER, source: 'prompt' as const },
  ];
  const time = async (run: () => Promise<unknown>): Promise<Summary> => {
    for (let i = 0; i < 500; i++) await run();
    const samples = new Float64Array(count);
    for (let i = 0; i < count; i++) {
      const t0 = performance.now();
      await run();
      samples[i] = (performance.now() - t0) * 1000;
    }
    return summarize(samples);
  };
  // Awaited as a route awaits them: the promises around the synchronous classifier are part of the cost.
  return {
    prompt: await time(() => checkPrompt(active, parts)),
    completion: await time(() => checkCompletion(active, ANSWER)),
  };
}

function pooled(measured: Measured[], field: 'latency' | 'ttfc'): Summary {
  return summarize(measured.flatMap((m) => Array.from(m.result[field])));
}

function cpuPerRequestUs(measured: Measured[]): number {
  const cpu = measured.reduce((sum, m) => sum + m.cpuMs, 0);
  const count = measured.reduce((sum, m) => sum + m.result.completedAll, 0);
  return count === 0 ? Number.NaN : (cpu * 1000) / count;
}

function reqPerSecond(measured: Measured[]): number {
  const done = measured.reduce((sum, m) => sum + m.result.completed, 0);
  const ms = measured.reduce((sum, m) => sum + m.result.windowMs, 0);
  return ms === 0 ? Number.NaN : (done * 1000) / ms;
}

const ms = (n: number) => (Number.isFinite(n) ? n.toFixed(3) : 'n/a');
const signedMs = (n: number) => (Number.isFinite(n) ? `${n >= 0 ? '+' : ''}${n.toFixed(3)}` : 'n/a');
const signedInt = (n: number) => (Number.isFinite(n) ? `${n >= 0 ? '+' : ''}${int0(n)}` : 'n/a');

function statsUs(s: Summary, us: (n: number) => string): string[] {
  return [us(s.p50), us(s.p99), us(s.mean)];
}

/** The target: annotate adds at most this much at the median for the 1 KB prompt, non-streamed, c=1. */
const TARGET_ADDED_P50_MS = 0.2;

function report(
  runs: Map<string, Map<LaneTarget, Measured[]>>,
  phases: LanePhase[],
  note: string,
  active: boolean,
  chunks: number,
  errors: string[],
  inProcess: CheckTimes,
): SafetyLaneResult {
  const out: string[] = [];
  const json: Record<string, unknown> = { note, active, promptChars: USER.length, chunks, phases: {} };
  const summary: Record<string, number> = {};
  for (const phase of phases) {
    const byTarget = runs.get(phase.id);
    if (!byTarget) continue;
    const direct = pooled(byTarget.get('direct') ?? [], 'latency');
    const rows: string[][] = [];
    const phaseJson: Record<string, unknown> = {};
    const lat: Partial<Record<LaneTarget, Summary>> = {};
    const cpu: Partial<Record<LaneTarget, number>> = {};
    for (const [name, measured] of byTarget) {
      const l = pooled(measured, 'latency');
      const ttfc = phase.stream ? pooled(measured, 'ttfc') : undefined;
      const isDirect = name === 'direct';
      lat[name] = l;
      cpu[name] = cpuPerRequestUs(measured);
      const rps = reqPerSecond(measured);
      rows.push([
        name,
        ms(l.p50),
        ms(l.p99),
        isDirect ? '' : signedMs(l.p50 - direct.p50),
        ttfc ? ms(ttfc.p50) : '',
        phase.plan.kind === 'time' ? int0(rps) : '',
        isDirect ? '' : int0(cpu[name] ?? Number.NaN),
      ]);
      phaseJson[name] = {
        p50: round3(l.p50),
        p99: round3(l.p99),
        addedP50: isDirect ? null : round3(l.p50 - direct.p50),
        ttfcP50: ttfc ? round3(ttfc.p50) : null,
        reqPerS: phase.plan.kind === 'time' ? round3(rps) : null,
        cpuUsPerRequest: isDirect ? null : round3(cpu[name] ?? Number.NaN),
      };
    }
    const versus = (name: LaneTarget) => ({
      p50: (lat[name]?.p50 ?? Number.NaN) - (lat['gantry-plain']?.p50 ?? Number.NaN),
      p99: (lat[name]?.p99 ?? Number.NaN) - (lat['gantry-plain']?.p99 ?? Number.NaN),
      cpu: (cpu[name] ?? Number.NaN) - (cpu['gantry-plain'] ?? Number.NaN),
    });
    const annotate = versus('gantry-annotate');
    const off = versus('gantry-off');
    for (const [label, d] of [
      ['annotate adds', annotate],
      ['off adds', off],
    ] as const) {
      rows.push([label, signedMs(d.p50), signedMs(d.p99), '', '', '', signedInt(d.cpu)]);
    }
    summary[`${phase.id} annotate added p50 ms`] = round3(annotate.p50);
    summary[`${phase.id} annotate added p99 ms`] = round3(annotate.p99);
    summary[`${phase.id} annotate CPU us/req`] = round3(annotate.cpu);
    summary[`${phase.id} off added p50 ms`] = round3(off.p50);
    phaseJson.annotateAdds = {
      p50Ms: round3(annotate.p50),
      p99Ms: round3(annotate.p99),
      cpuUsPerRequest: round3(annotate.cpu),
    };
    phaseJson.offAdds = { p50Ms: round3(off.p50), p99Ms: round3(off.p99), cpuUsPerRequest: round3(off.cpu) };
    (json.phases as Record<string, unknown>)[phase.id] = phaseJson;
    out.push(
      table(
        `Safety: ${phase.id} (${USER.length}-char prompt${phase.stream ? `, ${chunks}-chunk stream` : ''}; ${note})`,
        ['target', 'p50 ms', 'p99 ms', 'added p50', 'first content p50', 'req/s', 'Gantry CPU µs/req'],
        rows,
      ),
    );
  }
  const us = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : 'n/a');
  out.push(
    table(
      'Safety: the checks alone, in-process (this checkout, offline classifier, annotate)',
      ['check', 'p50 µs', 'p99 µs', 'mean µs'],
      [
        [`prompt (${SYSTEM.length + USER.length} chars)`, ...statsUs(inProcess.prompt, us)],
        [`completion (${ANSWER.length} chars)`, ...statsUs(inProcess.completion, us)],
      ],
    ),
  );
  json.inProcessUs = {
    prompt: { p50: round3(inProcess.prompt.p50), p99: round3(inProcess.prompt.p99) },
    completion: { p50: round3(inProcess.completion.p50), p99: round3(inProcess.completion.p99) },
  };
  const added = summary['json-c1 annotate added p50 ms'] ?? Number.NaN;
  const verdict = !active ? 'n/a (not wired)' : added <= TARGET_ADDED_P50_MS ? 'PASS' : 'MISS';
  json.target = {
    metric: 'json-c1 annotate added p50 ms',
    limit: TARGET_ADDED_P50_MS,
    value: added,
    verdict,
  };
  out.push(
    `\nsafety target: annotate adds ${signedMs(added)} ms at the median (1 KB prompt, c=1), limit ` +
      `${TARGET_ADDED_P50_MS} ms: ${verdict}`,
  );
  json.summary = summary;
  json.errors = errors;
  if (errors.length > 0) out.push(`\nWARNING (safety lane): requests failed:\n  ${errors.join('\n  ')}`);
  return { text: out.join('\n'), json, errors };
}
