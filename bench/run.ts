/**
 * `npm run bench`: what Gantry costs on top of a plain upstream call.
 *
 * Starts child processes on 127.0.0.1 (random ports): a fake OpenAI-compatible upstream that answers at
 * once, a bare pass-through proxy (node:http + undici, no logic: the practical ceiling for a Node
 * gateway), and the compiled Gantry with one `openai` provider pointing at the fake. Then it drives the
 * targets ("direct" is the fake itself), interleaved round by round so machine noise hits them alike, and
 * prints added latency, throughput, streaming times, CPU per request and Gantry's memory, with PASS/MISS
 * against the performance targets. Results go to bench/results/latest.json.
 *
 * Limits and metering: the same compiled Gantry runs twice more with tier ceilings (account and model
 * buckets: concurrency, requests, input and output tokens, all too high to refuse), a billable price and
 * credits: `gantry-limits` in-process (embedded mode), `gantry-redis` on a redis-server the bench starts
 * (temp dir, no persistence; skipped with a warning when redis-server is missing). Their added latency
 * is reported against `gantry` (no ceilings), and a short run under MONITOR counts the Redis commands
 * each request costs.
 *
 * Settings (environment variable, or flag where shown):
 *   BENCH_QUICK=1 / --quick        one short round (~35 s) instead of the default run (~2 min 15 s)
 *   BENCH_ROUNDS / --rounds N      rounds (default 3, quick 1)
 *   BENCH_LATENCY_REQUESTS         measured requests per target and round at concurrency 1 (2000)
 *   BENCH_THROUGHPUT_MS            measured time per target, round and concurrency (2500)
 *   BENCH_CONCURRENCY              non-streaming throughput concurrencies (32,256)
 *   BENCH_STREAM_REQUESTS          measured streams per target and round at concurrency 1 (400)
 *   BENCH_STREAM_CONCURRENCY       streaming concurrencies besides 1 (32; empty for none)
 *   BENCH_STREAM_MS                measured time per target and round of those (2000)
 *   BENCH_CHUNKS                   content chunks per stream (32)
 *   BENCH_CHUNK_GAP_MS             pause between stream chunks in the fake upstream (0)
 *   BENCH_RENAME=1 / --rename      add a Gantry target whose route renames the model upstream
 *   BENCH_PROFILE=1 / --profile    run Gantry under `node --cpu-prof` and print where its time went
 *   BENCH_PROFILE_TARGET           which Gantry to profile: gantry (default), gantry-limits, gantry-redis
 *   BENCH_PHASES                   which measurements: latency,throughput,stream,predictions (all), and
 *                                  anthropic (not in the default set); e.g. for profiling. `predictions` is
 *                                  bench/predictions.ts (its settings: BENCH_PRED_*, listed there);
 *                                  BENCH_PHASES=predictions runs it alone (~1 min). `anthropic` is the
 *                                  Anthropic-translation lane, bench/anthropic.ts (BENCH_ANTHROPIC_*, listed
 *                                  there); BENCH_PHASES=anthropic runs it alone. `safety` (not in the default
 *                                  set either) is the safety lane, bench/safety.ts (BENCH_SAFETY_*, listed
 *                                  there): policy off and annotate against the plain model. `routing` is the
 *                                  dead-deployment lane, bench/routing.ts (BENCH_ROUTING_*, listed
 *                                  there); BENCH_PHASES=routing runs it alone
 *   BENCH_OUT                      JSON output file (bench/results/latest.json)
 *   BENCH_GANTRY_BIN               the gantry command to run (bin/gantry.js)
 *   BENCH_COMPARE_BIN              a second gantry command (e.g. another build's bin/gantry.js), measured
 *                                  side by side as target `gantry-b`: an A/B comparison in one run
 *   BENCH_COMPARE_FLAGS            node flags for gantry-b instead of those of `npm start` (which every
 *                                  Gantry target runs with): with the same build, an A/B of the flags
 *   BENCH_LIMITS=0                 leave out gantry-limits and gantry-redis
 *   BENCH_REDIS=0                  leave out gantry-redis only
 *   BENCH_LIMITS_PHASES            phases gantry-limits and gantry-redis take part in, by id: latency-c1,
 *                                  throughput-c<N>, stream-c1, stream-c<N>, or all (latency-c1,throughput-c32)
 *   BENCH_REDIS_COUNT_REQUESTS     requests of the Redis command count run under MONITOR (2000, quick 500;
 *                                  0 skips it)
 *   BENCH_REDIS_SERVER             the redis-server command (redis-server, from PATH)
 */

import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { type AnthropicLaneResult, runAnthropicLane } from './anthropic.js';
import {
  adoptPid,
  type Child,
  killAllNow,
  ORPHAN_GUARD,
  readCpuMs,
  readMemory,
  startChild,
  stopAll,
  stopChild,
} from './lib/children.js';
import { envInt, envIntList, gantryNodeFlags } from './lib/env.js';
import { cpuProfFlags, startGantryChild } from './lib/gantry-child.js';
import { createDispatcher, drive, type PhaseResult, type Plan, type RequestSpec } from './lib/load.js';
import { formatProfile, type ProfileSummary, summarizeProfile } from './lib/profile.js';
import { countRedisCommands, type RedisCount, scriptNames } from './lib/redis-count.js';
import { median, round3, roundSummary, type Summary, summarize } from './lib/stats.js';
import { int0, table } from './lib/table.js';
import { runPredictionsPhase } from './predictions.js';
import { runRoutingLane } from './routing.js';
import { runSafetyLane, type SafetyLaneResult } from './safety.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TARGETS = {
  addedP50Ms: 1,
  addedP99Ms: 3,
  throughputPctOfBare: 60,
  ttfcVsBareMs: 1,
  /** gantry-limits p50 − gantry p50 at c=1: what in-process limits and metering add. */
  limitsAddedP50Ms: 0.2,
  /** gantry-redis p50 − gantry p50 at c=1: what limits and metering on Redis add. */
  redisAddedP50Ms: 1,
  /** Redis round trips per admission (the admission script: one EVALSHA). */
  redisRoundTripsPerAdmission: 1,
};

// ---------------------------------------------------------------------------------------------- settings

const { values: flags } = parseArgs({
  options: {
    quick: { type: 'boolean' },
    profile: { type: 'boolean' },
    rename: { type: 'boolean' },
    rounds: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (flags.help) {
  const doc = /\/\*\*([\s\S]*?)\*\//.exec(readFileSync(fileURLToPath(import.meta.url), 'utf8'));
  process.stdout.write(`${(doc?.[1] ?? '').replace(/^ \* ?/gm, '')}\n`);
  process.exit(0);
}

const env = process.env;
const truthy = (v: string | undefined) => v !== undefined && v !== '' && v !== '0' && v !== 'false';
const quick = flags.quick === true || truthy(env.BENCH_QUICK);
const off = (v: string | undefined) => v === '0' || v === 'false' || v === 'no' || v === 'off';

function phaseSet(raw: string | undefined): string[] {
  const all = ['latency', 'throughput', 'stream', 'predictions'];
  if (raw === undefined || raw.trim() === '') return all;
  const chosen = raw.split(',').map((s) => s.trim());
  const unknown = chosen.filter(
    (p) => !all.includes(p) && p !== 'anthropic' && p !== 'safety' && p !== 'routing',
  );
  if (unknown.length > 0)
    throw new Error(`BENCH_PHASES: unknown ${unknown.join(', ')} (use ${all.join(', ')})`);
  return chosen;
}

/** BENCH_LIMITS_PHASES: phase ids, or undefined for every phase. */
function phaseIds(raw: string | undefined): string[] | undefined {
  const text = raw === undefined || raw.trim() === '' ? 'latency-c1,throughput-c32' : raw;
  if (text.trim() === 'all') return undefined;
  const ids = text.split(',').map((s) => s.trim());
  const bad = ids.filter((id) => !/^(latency-c1|throughput-c\d+|stream-c\d+)$/.test(id));
  if (bad.length > 0)
    throw new Error(`BENCH_LIMITS_PHASES: unknown ${bad.join(', ')} (e.g. latency-c1,throughput-c32 or all)`);
  return ids;
}

const settings = {
  quick,
  rounds: flags.rounds ? Number(flags.rounds) : envInt('BENCH_ROUNDS', quick ? 1 : 3, 1, 100),
  latencyWarmup: quick ? 300 : 500,
  latencyRequests: envInt('BENCH_LATENCY_REQUESTS', quick ? 800 : 2_000, 10),
  throughputWarmupMs: 400,
  throughputMs: envInt('BENCH_THROUGHPUT_MS', quick ? 1_200 : 2_500, 100, 600_000),
  phases: phaseSet(env.BENCH_PHASES),
  concurrency: envIntList('BENCH_CONCURRENCY', [32, 256], 4096),
  streamWarmup: quick ? 50 : 100,
  streamRequests: envInt('BENCH_STREAM_REQUESTS', quick ? 150 : 400, 10),
  streamConcurrency: envIntList('BENCH_STREAM_CONCURRENCY', [32], 4096),
  streamMs: envInt('BENCH_STREAM_MS', quick ? 1_000 : 2_000, 100, 600_000),
  chunks: envInt('BENCH_CHUNKS', 32, 1, 10_000),
  gapMs: envInt('BENCH_CHUNK_GAP_MS', 0, 0, 10_000),
  rename: flags.rename === true || truthy(env.BENCH_RENAME),
  profile: flags.profile === true || truthy(env.BENCH_PROFILE),
  /** Which Gantry runs under --cpu-prof: gantry, gantry-limits or gantry-redis. */
  profileTarget: env.BENCH_PROFILE_TARGET || 'gantry',
  /** Upstream connections of both proxies (Gantry's default max_connections). */
  upstreamConnections: 128,
  out: env.BENCH_OUT || join(ROOT, 'bench', 'results', 'latest.json'),
  /** The gantry command to measure (e.g. another checkout's bin/gantry.js, for an A/B comparison). */
  gantryBin: env.BENCH_GANTRY_BIN || join(ROOT, 'bin', 'gantry.js'),
  /** A second gantry command measured side by side as target `gantry-b` (A/B in one interleaved run). */
  compareBin: env.BENCH_COMPARE_BIN || undefined,
  /** Node flags for gantry-b instead of the start script's. */
  compareFlags:
    env.BENCH_COMPARE_FLAGS === undefined
      ? undefined
      : env.BENCH_COMPARE_FLAGS.split(/\s+/).filter((flag) => flag !== ''),
  /** gantry-limits: ceilings, pricing and credits, in-process. */
  limits: !off(env.BENCH_LIMITS),
  /** gantry-redis: the same on a redis-server started by the bench. */
  redis: !off(env.BENCH_LIMITS) && !off(env.BENCH_REDIS),
  /** Phases the two limits targets take part in (undefined: all). */
  limitsPhases: phaseIds(env.BENCH_LIMITS_PHASES),
  redisCountRequests: envInt('BENCH_REDIS_COUNT_REQUESTS', quick ? 500 : 2_000, 0, 1_000_000),
  redisServer: env.BENCH_REDIS_SERVER || 'redis-server',
};
if (!settings.phases.includes('throughput')) settings.concurrency = [];
if (!settings.phases.includes('stream')) settings.streamConcurrency = [];
if (!['gantry', 'gantry-limits', 'gantry-redis'].includes(settings.profileTarget))
  throw new Error('BENCH_PROFILE_TARGET: gantry, gantry-limits or gantry-redis');
if (!Number.isInteger(settings.rounds) || settings.rounds < 1)
  throw new Error('--rounds: expected a positive integer');

// ------------------------------------------------------------------------------------------------ targets

type TargetName =
  | 'direct'
  | 'bare'
  | 'gantry'
  | 'gantry-rename'
  | 'gantry-b'
  | 'gantry-limits'
  | 'gantry-redis';

interface Target {
  name: TargetName;
  origin: string;
  model: string;
  /** The process that serves this target, besides the upstream (none for direct). */
  proxy?: Child;
  /** Another process working for this target (gantry-redis: redis-server), whose CPU is counted too. */
  sidecarPid?: number;
  /** The phases (ids) this target takes part in; all when absent. */
  phases?: ReadonlySet<string>;
  json: RequestSpec;
  stream: RequestSpec;
  pools: Map<number, Pool>;
}

const MODEL = 'bench/chat';
const RENAMED_MODEL = 'bench/chat-renamed';
const UPSTREAM_NAME_FOR_RENAMED = 'bench-upstream-chat';
const API_KEY = `gty_bench_${randomBytes(24).toString('base64url')}`;

function chatBody(model: string, stream: boolean): Buffer {
  return Buffer.from(
    JSON.stringify({
      model,
      messages: [
        { role: 'system', content: 'You are a concise assistant. Answer in one short paragraph.' },
        { role: 'user', content: 'Write a haiku about load balancers, then explain it in one sentence.' },
      ],
      temperature: 0.7,
      max_tokens: 256,
      ...(stream ? { stream: true } : {}),
    }),
  );
}

function makeTarget(
  name: TargetName,
  origin: string,
  model: string,
  proxy?: Child,
  extra: { sidecarPid?: number; phases?: ReadonlySet<string> } = {},
): Target {
  const headers = {
    'content-type': 'application/json',
    accept: 'application/json',
    authorization: `Bearer ${API_KEY}`,
    'user-agent': 'gantry-bench/0.1',
  };
  const path = '/v1/chat/completions';
  return {
    name,
    origin,
    model,
    ...(proxy ? { proxy } : {}),
    ...extra,
    json: { path, headers, body: chatBody(model, false), stream: false },
    stream: { path, headers, body: chatBody(model, true), stream: true },
    pools: new Map(),
  };
}

function poolOf(target: Target, concurrency: number): Pool {
  let pool = target.pools.get(concurrency);
  if (!pool) {
    pool = createDispatcher(target.origin, concurrency);
    target.pools.set(concurrency, pool);
  }
  return pool;
}

/**
 * The limits targets' ceilings: every kind set on both buckets, far above what the bench sends (about
 * 10,000 requests/s at most, 40 input and 256 reserved output tokens each, 256 at once), so nothing is
 * ever refused but every counter is checked and moved on every request.
 */
const CEILINGS = {
  account: {
    concurrency: 100_000,
    requests: 2_000_000_000,
    input_tokens: 1_000_000_000_000,
    output_tokens: 1_000_000_000_000,
  },
  model: {
    concurrency: 50_000,
    requests: 1_000_000_000,
    input_tokens: 500_000_000_000,
    output_tokens: 500_000_000_000,
  },
};
/** Credits every account starts with (micro-credits must stay a safe integer: 1e9 credits = 1e15). */
const DEFAULT_BALANCE = 1_000_000_000;

/** Gantry's config; `limits`: tier ceilings, a billable price and a credit balance (gantry-limits/-redis). */
function gantryYaml(upstreamPort: number, limits = false): string {
  const pricing = limits
    ? `
    billable: true
    pricing:
      amount: 2
      currency: USD
      unit: million_token`
    : '';
  const model = (namespace: string, upstreamModel: string) => `
  - namespace: ${namespace}
    name: Bench chat (${upstreamModel})
    type: text
    apis: [chat]${pricing}
    routes:
      - provider: bench-upstream
        model: ${upstreamModel}`;
  const ceilings = (c: Record<string, number>) =>
    Object.entries(c)
      .map(([k, v]) => `\n      ${k}: ${v}`)
      .join('');
  const tiers = limits
    ? `
  default:
    window_seconds: 60
    account:${ceilings(CEILINGS.account)}
    model:${ceilings(CEILINGS.model)}
credits:
  per_currency: { USD: 1000 }
  default_balance: ${DEFAULT_BALANCE}`
    : `
  default: {}`;
  return `# Written by bench/run.ts for one run.
server:
  host: 127.0.0.1
  port: 0
  log_level: warn
providers:
  bench-upstream:
    kind: openai
    base_url: http://127.0.0.1:${upstreamPort}/v1
    max_connections: ${settings.upstreamConnections}
tiers:${tiers}
models:${model(MODEL, MODEL)}${model(RENAMED_MODEL, UPSTREAM_NAME_FOR_RENAMED)}
`;
}

// --------------------------------------------------------------------------------------------- sanity

const isLimited = (name: string) => name === 'gantry-limits' || name === 'gantry-redis';

interface Checked {
  content: string;
  chunks: number;
}

/** One JSON and one streamed request per target, checked field by field, so no target wins by failing. */
async function sanityCheck(target: Target): Promise<{ json: Checked; stream: Checked }> {
  const pool = new Pool(target.origin, { connections: 1 });
  try {
    const send = async (spec: RequestSpec) => {
      const res = await pool.request({
        method: 'POST',
        path: spec.path,
        headers: spec.headers,
        body: spec.body,
      });
      const text = await res.body.text();
      if (res.statusCode !== 200)
        throw new Error(`${target.name}: HTTP ${res.statusCode}: ${text.slice(0, 300)}`);
      return { text, contentType: String(res.headers['content-type'] ?? ''), headers: res.headers };
    };
    const j = await send(target.json);
    if (!j.contentType.startsWith('application/json'))
      throw new Error(`${target.name}: JSON answer is ${j.contentType}`);
    if (isLimited(target.name)) {
      // The limiter ran: the answer carries the tightest bucket's quota (the model bucket's ceilings).
      const limit = Number(j.headers['x-ratelimit-limit-requests']);
      const tokensOut = Number(j.headers['x-gantry-ratelimit-limit-tokens-out']);
      if (limit !== CEILINGS.model.requests || tokensOut !== CEILINGS.model.output_tokens) {
        throw new Error(
          `${target.name}: no rate-limit headers from the configured ceilings (x-ratelimit-limit-requests: ` +
            `${j.headers['x-ratelimit-limit-requests']}, x-gantry-ratelimit-limit-tokens-out: ` +
            `${j.headers['x-gantry-ratelimit-limit-tokens-out']})`,
        );
      }
    }
    const body = JSON.parse(j.text) as {
      object?: string;
      model?: string;
      choices?: Array<{ message?: { content?: string } }>;
    };
    const content = body.choices?.[0]?.message?.content;
    if (body.object !== 'chat.completion' || typeof content !== 'string' || body.model !== target.model) {
      throw new Error(`${target.name}: unexpected chat.completion: ${j.text.slice(0, 300)}`);
    }

    const s = await send(target.stream);
    if (!s.contentType.startsWith('text/event-stream'))
      throw new Error(`${target.name}: stream answer is ${s.contentType}`);
    const events = s.text.split('\n\n').filter((e) => e !== '');
    if (events.at(-1) !== 'data: [DONE]') throw new Error(`${target.name}: stream does not end with [DONE]`);
    let streamed = '';
    let chunks = 0;
    let sawRole = false;
    let finish: string | null = null;
    for (const event of events.slice(0, -1)) {
      if (!event.startsWith('data: '))
        throw new Error(`${target.name}: not a data event: ${event.slice(0, 100)}`);
      const chunk = JSON.parse(event.slice(6)) as {
        object?: string;
        model?: string;
        choices?: Array<{ delta?: { role?: string; content?: string }; finish_reason?: string | null }>;
      };
      if (chunk.object !== 'chat.completion.chunk' || chunk.model !== target.model) {
        throw new Error(`${target.name}: unexpected chunk: ${event.slice(0, 300)}`);
      }
      const choice = chunk.choices?.[0];
      if (choice?.delta?.role === 'assistant') sawRole = true;
      else if (typeof choice?.delta?.content === 'string') {
        streamed += choice.delta.content;
        chunks++;
      }
      if (choice?.finish_reason) finish = choice.finish_reason;
    }
    if (!sawRole || finish !== 'stop' || chunks !== settings.chunks) {
      throw new Error(`${target.name}: stream has role=${sawRole} finish=${finish} content chunks=${chunks}`);
    }
    return { json: { content, chunks: 1 }, stream: { content: streamed, chunks } };
  } finally {
    await pool.close();
  }
}

// ------------------------------------------------------------------------------------------------ phases

interface Phase {
  id: string;
  label: string;
  stream: boolean;
  plan: Plan;
}

function phases(): Phase[] {
  const out: Phase[] = [];
  if (settings.phases.includes('latency')) {
    out.push({
      id: 'latency-c1',
      label: 'latency c=1',
      stream: false,
      plan: {
        kind: 'count',
        concurrency: 1,
        warmup: settings.latencyWarmup,
        requests: settings.latencyRequests,
      },
    });
  }
  for (const c of settings.concurrency) {
    out.push({
      id: `throughput-c${c}`,
      label: `throughput c=${c}`,
      stream: false,
      plan: {
        kind: 'time',
        concurrency: c,
        warmupMs: settings.throughputWarmupMs,
        durationMs: settings.throughputMs,
      },
    });
  }
  if (settings.phases.includes('stream')) {
    out.push({
      id: 'stream-c1',
      label: 'stream c=1',
      stream: true,
      plan: {
        kind: 'count',
        concurrency: 1,
        warmup: settings.streamWarmup,
        requests: settings.streamRequests,
      },
    });
  }
  for (const c of settings.streamConcurrency) {
    out.push({
      id: `stream-c${c}`,
      label: `stream c=${c}`,
      stream: true,
      plan: {
        kind: 'time',
        concurrency: c,
        warmupMs: settings.throughputWarmupMs,
        durationMs: settings.streamMs,
      },
    });
  }
  return out;
}

interface Run {
  round: number;
  result: PhaseResult;
  /** CPU used during the phase (ms): the target's proxy process, the upstream, the bench itself. */
  cpuProxyMs: number;
  cpuUpstreamMs: number;
  cpuBenchMs: number;
  /** CPU of the target's sidecar (gantry-redis: redis-server); 0 without one. */
  cpuSidecarMs: number;
  /** New TCP connections the upstream accepted during the phase (keep-alive working: about 0). */
  upstreamConnections: number;
}

/** runs[phase][target] = one entry per round */
type Runs = Map<string, Map<TargetName, Run[]>>;

/** The fake upstream's counters, read over one connection of their own. */
async function upstreamStats(pool: Pool): Promise<{ connections: number; requests: number }> {
  const res = await pool.request({ method: 'GET', path: '/bench/stats' });
  return (await res.body.json()) as { connections: number; requests: number };
}

async function runPhase(
  target: Target,
  phase: Phase,
  upstream: Child,
  statsPool: Pool,
): Promise<Omit<Run, 'round'>> {
  const pool = poolOf(target, phase.plan.concurrency);
  const proxyPid = target.proxy?.pid;
  const sidecarPid = target.sidecarPid;
  const stats0 = await upstreamStats(statsPool);
  const cpu0 = [proxyPid ? readCpuMs(proxyPid) : 0, readCpuMs(upstream.pid), process.cpuUsage()] as const;
  const sidecar0 = sidecarPid ? readCpuMs(sidecarPid) : 0;
  const result = await drive(pool, phase.stream ? target.stream : target.json, phase.plan);
  const bench = process.cpuUsage(cpu0[2]);
  const cpuProxyMs = proxyPid ? readCpuMs(proxyPid) - cpu0[0] : 0;
  const cpuSidecarMs = sidecarPid ? readCpuMs(sidecarPid) - sidecar0 : 0;
  const cpuUpstreamMs = readCpuMs(upstream.pid) - cpu0[1];
  const stats1 = await upstreamStats(statsPool);
  return {
    result,
    cpuProxyMs,
    cpuUpstreamMs,
    cpuBenchMs: (bench.user + bench.system) / 1000,
    cpuSidecarMs,
    upstreamConnections: stats1.connections - stats0.connections,
  };
}

// ---------------------------------------------------------------------------------------------- report

const fmt = (n: number, digits = 3) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');
const signed = (n: number, digits = 3) =>
  Number.isFinite(n) ? `${n >= 0 ? '+' : ''}${n.toFixed(digits)}` : 'n/a';
const mb = (bytes: number | undefined) =>
  bytes === undefined ? 'n/a' : `${(bytes / 1024 / 1024).toFixed(1)} MB`;

interface Verdict {
  target: string;
  metric: string;
  value: number;
  limit: string;
  pass: boolean;
  /** How to print the value, when not in ms (signed) or % (metric names with %). */
  display?: string;
}

/**
 * JSON as Biome formats it (2 spaces; arrays of plain values on one line when they fit in 110 columns),
 * so `npm run lint` stays clean with a results file in the tree.
 */
function toJsonText(value: unknown): string {
  const text = JSON.stringify(value, null, 2);
  const collapsed = text.replace(
    /^( *)(.*)\[\n((?:\1 {2}[^\n[\]{}]*\n)+)\1\]/gm,
    (match, indent, head, body) => {
      const items = (body as string)
        .split('\n')
        .map((line) => line.trim().replace(/,$/, ''))
        .filter((line) => line !== '');
      const line = `${indent}${head}[${items.join(', ')}]`;
      return line.length <= 110 ? line : match;
    },
  );
  return `${collapsed}\n`;
}

// ------------------------------------------------------------------------------------------------- main

let cleaningUp: Promise<void> | undefined;
let interrupted = false;
const openPools: Pool[] = [];
let tempDir: string | undefined;

function cleanup(): Promise<void> {
  cleaningUp ??= (async () => {
    await Promise.all(openPools.map((p) => p.destroy().catch(() => undefined)));
    await stopAll(settings.profile ? 15_000 : 5_000);
    if (tempDir) rmSync(tempDir, { recursive: true, force: true });
  })();
  return cleaningUp;
}

process.on('exit', killAllNow);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    interrupted = true;
    process.stderr.write(`\nbench: ${signal}, stopping every process it started...\n`);
    const force = setTimeout(() => process.exit(130), 8_000);
    force.unref();
    void cleanup().finally(() => process.exit(130));
  });
}

async function main(): Promise<number> {
  const started = Date.now();
  const log = (msg: string) =>
    process.stdout.write(`[${((Date.now() - started) / 1000).toFixed(1).padStart(5)} s] ${msg}\n`);
  const cpuInfo = cpus();
  const host = {
    node: process.version,
    cpus: cpuInfo.length,
    cpuModel: cpuInfo[0]?.model ?? 'unknown',
    loadavgAtStart: loadavg().map((n) => round3(n)),
  };
  log(
    `gantry bench: node ${host.node}, ${host.cpus} CPUs (${host.cpuModel}), ${settings.rounds} round(s)` +
      `${settings.quick ? ' [quick]' : ''}${settings.profile ? ` [profiling ${settings.profileTarget}: its numbers are inflated]` : ''}`,
  );

  tempDir = mkdtempSync(join(tmpdir(), 'gantry-bench-'));
  const configPath = join(tempDir, 'gantry.yaml');
  const limitsConfigPath = join(tempDir, 'gantry-limits.yaml');
  const resultsDir = dirname(settings.out);
  const profileDir = join(ROOT, 'bench', 'results', 'profile');

  /** A run of one side lane alone (predictions or anthropic): its figures are the whole result file. */
  const writeLaneOnly = async (
    lane: Record<string, unknown>,
    errors: readonly unknown[],
  ): Promise<number> => {
    await cleanup();
    const durationS = Math.round((Date.now() - started) / 100) / 10;
    mkdirSync(resultsDir, { recursive: true });
    writeFileSync(
      settings.out,
      toJsonText({ version: 1, date: new Date().toISOString(), durationS, host, ...lane, errors }),
    );
    log(`results written to ${relative(ROOT, settings.out)} (${durationS} s in all)`);
    return errors.length > 0 ? 1 : 0;
  };

  // ---- predictions phase: bench/predictions.ts, before the chat targets start (its own children) ----
  const predictions = settings.phases.includes('predictions')
    ? await runPredictionsPhase({
        root: ROOT,
        quick,
        profile: settings.profile,
        alone: settings.phases.length === 1,
        gantryBin: settings.gantryBin,
        redis: settings.redis,
        redisServer: settings.redisServer,
        log,
      })
    : undefined;
  // ---- the Anthropic-translation lane: bench/anthropic.ts, its own children, before the chat targets ----
  let anthropicLane: AnthropicLaneResult | undefined;
  if (settings.phases.includes('anthropic')) {
    anthropicLane = await runAnthropicLane({
      root: ROOT,
      quick,
      rounds: settings.rounds,
      chunks: settings.chunks,
      gantryBin: settings.gantryBin,
      log,
    });
    process.stdout.write(`${anthropicLane.text}\n`);
    const rest = settings.phases.filter((p) => p !== 'anthropic' && p !== 'predictions' && p !== 'safety');
    if (rest.length === 0 && !predictions && !settings.phases.includes('safety')) {
      return writeLaneOnly({ anthropic: anthropicLane.json }, anthropicLane.errors);
    }
  }
  // ---- the routing lane: bench/routing.ts (one dead deployment of three, circuit open); always alone ----
  if (settings.phases.includes('routing')) {
    const lane = await runRoutingLane({
      root: ROOT,
      quick,
      rounds: settings.rounds,
      chunks: settings.chunks,
      gantryBin: settings.gantryBin,
      log,
    });
    process.stdout.write(`${lane.text}\n`);
    return writeLaneOnly({ routing: lane.json }, lane.errors);
  }
  // ---- the safety lane: bench/safety.ts, its own children, before the chat targets ----
  let safetyLane: SafetyLaneResult | undefined;
  if (settings.phases.includes('safety')) {
    safetyLane = await runSafetyLane({
      root: ROOT,
      quick,
      rounds: settings.rounds,
      chunks: settings.chunks,
      gantryBin: settings.gantryBin,
      log,
    });
    process.stdout.write(`${safetyLane.text}\n`);
    const rest = settings.phases.filter((p) => p !== 'anthropic' && p !== 'predictions' && p !== 'safety');
    if (rest.length === 0 && !predictions) {
      return writeLaneOnly(
        { safety: safetyLane.json, ...(anthropicLane ? { anthropic: anthropicLane.json } : {}) },
        [...safetyLane.errors, ...(anthropicLane?.errors ?? [])],
      );
    }
  }
  if (predictions && settings.phases.length === 1) {
    return writeLaneOnly(
      { predictions: predictions.json, verdicts: predictions.verdicts },
      predictions.errors,
    );
  }
  // ---- end of the predictions phase hook (its figures join the JSON and Targets below) ----

  // 1. the fake upstream
  const upstream = await startChild({
    name: 'upstream',
    args: [
      '--import',
      'tsx',
      'bench/upstream.ts',
      '--chunks',
      String(settings.chunks),
      '--gap-ms',
      String(settings.gapMs),
    ],
    cwd: ROOT,
    ready: 'ipc',
  });
  const upstreamOrigin = `http://127.0.0.1:${upstream.port}`;
  const statsPool = new Pool(upstreamOrigin, {
    connections: 1,
    keepAliveTimeout: 600_000,
    keepAliveMaxTimeout: 600_000,
  });
  openPools.push(statsPool);
  // 2. the bare proxy, and the redis-server of gantry-redis
  let redisSkipped: string | undefined;
  if (settings.redis && spawnSync(settings.redisServer, ['--version']).status !== 0) {
    redisSkipped = `${settings.redisServer} is not installed (or does not run): gantry-redis is SKIPPED (apt-get install -y redis-server)`;
    process.stdout.write(`\n!!!\n!!! ${redisSkipped}\n!!!\n\n`);
  }
  const redisPromise =
    settings.redis && !redisSkipped
      ? startChild({
          name: 'redis-server',
          args: ['--import', 'tsx', 'bench/redis-server.ts', '--server', settings.redisServer],
          cwd: ROOT,
          ready: 'ipc',
        })
      : undefined;
  const barePromise = startChild({
    name: 'bare-proxy',
    args: [
      '--import',
      'tsx',
      'bench/bare-proxy.ts',
      '--upstream',
      upstreamOrigin,
      '--connections',
      String(settings.upstreamConnections),
    ],
    cwd: ROOT,
    ready: 'ipc',
  });
  const [bare, redis] = await Promise.all([barePromise, redisPromise]);
  const redisPid = redis && typeof redis.info.pid === 'number' ? redis.info.pid : undefined;
  if (redis && redisPid) adoptPid(redis, redisPid);
  // 3. Gantry, compiled (every instance at once: each builds its tokenizer at start)
  writeFileSync(configPath, gantryYaml(upstream.port));
  writeFileSync(limitsConfigPath, gantryYaml(upstream.port, true));
  // Every Gantry runs with the node flags `npm start` uses; gantry-b with BENCH_COMPARE_FLAGS when set.
  const launchFlags = gantryNodeFlags(join(ROOT, 'package.json'));
  const nodeFlags = [...launchFlags, '--import', ORPHAN_GUARD];
  if (settings.profile) {
    rmSync(profileDir, { recursive: true, force: true });
    mkdirSync(profileDir, { recursive: true });
    nodeFlags.push(...cpuProfFlags(profileDir, `${settings.profileTarget}.cpuprofile`));
  }
  // Only gantry-redis runs on Redis, whatever the caller's environment says.
  const { GANTRY_CONFIG: _ignored, REDIS_URL: _ignoredToo, ...inherited } = process.env;
  const launchGantry = (
    name: string,
    bin: string,
    flags: string[],
    config = configPath,
    env: Record<string, string> = {},
  ) =>
    startGantryChild({
      name,
      cwd: ROOT,
      nodeFlags: flags,
      bin,
      config,
      env: { ...inherited, ...env },
      dataDir: join(tempDir as string, `data-${name}`),
      apiKey: API_KEY,
    });
  const guard = [...launchFlags, '--import', ORPHAN_GUARD];
  const flagsOf = (name: string) => (name === settings.profileTarget ? nodeFlags : guard);
  if (settings.profile && settings.profileTarget === 'gantry-redis' && !redis)
    throw new Error('BENCH_PROFILE_TARGET=gantry-redis, but gantry-redis does not run');
  if (settings.profile && settings.profileTarget === 'gantry-limits' && !settings.limits)
    throw new Error('BENCH_PROFILE_TARGET=gantry-limits, but BENCH_LIMITS=0');
  const [gantry, gantryB, gantryLimits, gantryRedis] = await Promise.all([
    launchGantry('gantry', settings.gantryBin, flagsOf('gantry')),
    settings.compareBin
      ? launchGantry('gantry-b', settings.compareBin, [
          ...(settings.compareFlags ?? launchFlags),
          '--import',
          ORPHAN_GUARD,
        ])
      : undefined,
    settings.limits
      ? launchGantry('gantry-limits', settings.gantryBin, flagsOf('gantry-limits'), limitsConfigPath)
      : undefined,
    redis
      ? launchGantry('gantry-redis', settings.gantryBin, flagsOf('gantry-redis'), limitsConfigPath, {
          REDIS_URL: `redis://127.0.0.1:${redis.port}`,
        })
      : undefined,
  ]);
  log(
    `upstream :${upstream.port} (pid ${upstream.pid}), bare proxy :${bare.port} (pid ${bare.pid}), gantry :${gantry.port} (pid ${gantry.pid})`,
  );

  const targets: Target[] = [
    makeTarget('direct', upstreamOrigin, MODEL),
    makeTarget('bare', `http://127.0.0.1:${bare.port}`, MODEL, bare),
    makeTarget('gantry', `http://127.0.0.1:${gantry.port}`, MODEL, gantry),
  ];
  if (settings.rename)
    targets.push(makeTarget('gantry-rename', `http://127.0.0.1:${gantry.port}`, RENAMED_MODEL, gantry));
  if (gantryB) {
    targets.push(makeTarget('gantry-b', `http://127.0.0.1:${gantryB.port}`, MODEL, gantryB));
    log(`gantry-b (${settings.compareBin}) :${gantryB.port} (pid ${gantryB.pid})`);
  }
  const limitsPhases = settings.limitsPhases ? new Set(settings.limitsPhases) : undefined;
  const limitsExtra = limitsPhases ? { phases: limitsPhases } : {};
  if (gantryLimits) {
    targets.push(
      makeTarget('gantry-limits', `http://127.0.0.1:${gantryLimits.port}`, MODEL, gantryLimits, limitsExtra),
    );
    log(
      `gantry-limits (ceilings, pricing, credits; embedded) :${gantryLimits.port} (pid ${gantryLimits.pid})`,
    );
  }
  if (gantryRedis && redis) {
    targets.push(
      makeTarget('gantry-redis', `http://127.0.0.1:${gantryRedis.port}`, MODEL, gantryRedis, {
        ...limitsExtra,
        ...(redisPid ? { sidecarPid: redisPid } : {}),
      }),
    );
    log(
      `gantry-redis (the same on Redis) :${gantryRedis.port} (pid ${gantryRedis.pid}), redis-server ` +
        `${String(redis.info.version)} :${redis.port} (pid ${redisPid})`,
    );
  }
  const names = targets.map((t) => t.name);
  const takesPart = (target: Target, phase: Phase) => !target.phases || target.phases.has(phase.id);

  // Sanity: every target answers the same, well-formed content.
  const checked = await Promise.all(targets.map((t) => sanityCheck(t)));
  for (const c of checked.slice(1)) {
    if (c.json.content !== checked[0]?.json.content || c.stream.content !== checked[0]?.stream.content) {
      throw new Error('sanity: the targets do not answer the same content');
    }
  }
  log(`sanity ok: every target answers the same chat.completion and a ${settings.chunks}-chunk stream`);

  // Warm-up (JIT, connection pools) for every target, not measured.
  const allPhases = phases();
  if (limitsPhases && env.BENCH_LIMITS_PHASES) {
    const unknown = [...limitsPhases].filter((id) => !allPhases.some((p) => p.id === id));
    if (unknown.length > 0 && (gantryLimits || gantryRedis)) {
      log(`note: BENCH_LIMITS_PHASES names phases this run does not have: ${unknown.join(', ')}`);
    }
  }
  for (const target of targets) {
    for (const phase of allPhases.filter((p) => takesPart(target, p))) {
      const plan: Plan =
        phase.plan.kind === 'count'
          ? { ...phase.plan, warmup: 0, requests: phase.plan.warmup * 2 }
          : { ...phase.plan, warmupMs: 0, durationMs: quick ? 300 : 600 };
      const pool = poolOf(target, plan.concurrency);
      if (!openPools.includes(pool)) openPools.push(pool);
      const r = await drive(pool, phase.stream ? target.stream : target.json, plan);
      if (r.errors > 0)
        throw new Error(`warm-up ${target.name} ${phase.label}: ${r.errorSamples.join('; ')}`);
    }
  }
  const gantryAfterWarmup = readMemory(gantry.pid);
  log('warm-up done');

  // Measurement: round by round, phase by phase, the targets in a rotating order.
  const runs: Runs = new Map();
  const gantryRssByRound: Array<number | undefined> = [];
  for (let round = 0; round < settings.rounds; round++) {
    for (const phase of allPhases) {
      const active = targets.filter((t) => takesPart(t, phase));
      const order = active.map((_, i) => active[(i + round) % active.length] as Target);
      for (const target of order) {
        const run = await runPhase(target, phase, upstream, statsPool);
        const byTarget = runs.get(phase.id) ?? new Map<TargetName, Run[]>();
        runs.set(phase.id, byTarget);
        const list = byTarget.get(target.name) ?? [];
        list.push({ round, ...run });
        byTarget.set(target.name, list);
      }
    }
    gantryRssByRound.push(readMemory(gantry.pid)?.rss);
    log(`round ${round + 1}/${settings.rounds} done (gantry RSS ${mb(gantryRssByRound.at(-1))})`);
  }
  const memory = {
    gantry: readMemory(gantry.pid),
    gantryAfterWarmup,
    gantryRssByRound,
    gantryB: gantryB ? readMemory(gantryB.pid) : undefined,
    gantryLimits: gantryLimits ? readMemory(gantryLimits.pid) : undefined,
    gantryRedis: gantryRedis ? readMemory(gantryRedis.pid) : undefined,
    redisServer: redisPid ? readMemory(redisPid) : undefined,
    bare: readMemory(bare.pid),
    upstream: readMemory(upstream.pid),
  };

  // Redis commands per request: a short run on gantry-redis under MONITOR, apart from the timed phases.
  let redisCount: RedisCount | undefined;
  const countErrors: string[] = [];
  const redisTarget = targets.find((t) => t.name === 'gantry-redis');
  if (redisTarget && redis && settings.redisCountRequests > 0) {
    const pool = poolOf(redisTarget, 1);
    if (!openPools.includes(pool)) openPools.push(pool);
    const scripts = await scriptNames(settings.gantryBin);
    // 750 ms idle on each side of the window: 3 usage flushes (every 250 ms by default).
    redisCount = await countRedisCommands(redis.port, scripts, 750, async () => {
      const r = await drive(pool, redisTarget.json, {
        kind: 'count',
        concurrency: 1,
        warmup: 0,
        requests: settings.redisCountRequests,
      });
      if (r.errors > 0)
        countErrors.push(`redis count run: ${r.errors} errors (${r.errorSamples.join('; ')})`);
      return r.completedAll;
    });
    log(`redis command count done (${redisCount.requests} requests under MONITOR)`);
  }

  // ------------------------------------------------------------------------------------------ aggregation
  const pooled = (phaseId: string, name: TargetName, field: 'latency' | 'ttfc'): Summary => {
    const list = runs.get(phaseId)?.get(name) ?? [];
    const all: number[] = [];
    for (const r of list) for (const v of r.result[field]) all.push(v);
    return summarize(all);
  };
  const rpsPerRound = (phaseId: string, name: TargetName): number[] =>
    (runs.get(phaseId)?.get(name) ?? []).map((r) => (r.result.completed * 1000) / r.result.windowMs);
  const cpuPerRequestUs = (
    phaseId: string,
    name: TargetName,
    which: 'cpuProxyMs' | 'cpuUpstreamMs' | 'cpuBenchMs' | 'cpuSidecarMs',
  ) => {
    const list = runs.get(phaseId)?.get(name) ?? [];
    const ms = list.reduce((s, r) => s + r[which], 0);
    const n = list.reduce((s, r) => s + r.result.completedAll, 0);
    return n > 0 ? (ms * 1000) / n : Number.NaN;
  };
  const newUpstreamConnections = (phaseId: string, name: TargetName) =>
    (runs.get(phaseId)?.get(name) ?? []).reduce((sum, r) => sum + r.upstreamConnections, 0);
  const errors: string[] = [...countErrors];
  for (const [phaseId, byTarget] of runs) {
    for (const [name, list] of byTarget) {
      for (const r of list) {
        if (r.result.errors > 0) {
          errors.push(
            `${phaseId} ${name} round ${r.round + 1}: ${r.result.errors} errors (${r.result.errorSamples.join('; ')})`,
          );
        }
      }
    }
  }

  const out: string[] = [];
  const verdicts: Verdict[] = [];
  /** The targets measured in a phase, in target order. */
  const namesIn = (phaseId: string) => names.filter((n) => (runs.get(phaseId)?.get(n) ?? []).length > 0);
  const gantryIn = (phaseId: string) => namesIn(phaseId).filter((n) => n.startsWith('gantry'));
  const json: Record<string, unknown> = {
    version: 1,
    date: new Date().toISOString(),
    durationS: 0,
    host,
    settings: { ...settings, out: relative(ROOT, settings.out) },
    targets: TARGETS,
  };

  // Latency at concurrency 1.
  if (settings.phases.includes('latency')) {
    const here = namesIn('latency-c1');
    const gantryHere = gantryIn('latency-c1');
    const lat = new Map(here.map((n) => [n, pooled('latency-c1', n, 'latency')] as const));
    const direct = lat.get('direct') as Summary;
    out.push(
      table(
        `Non-streaming latency, concurrency 1 (ms; ${settings.rounds} x ${settings.latencyRequests} requests per target, pooled)`,
        ['target', 'p50', 'p90', 'p99', 'mean', 'added p50', 'added p99'],
        here.map((n) => {
          const s = lat.get(n) as Summary;
          const isDirect = n === 'direct';
          return [
            n,
            fmt(s.p50),
            fmt(s.p90),
            fmt(s.p99),
            fmt(s.mean),
            isDirect ? '' : signed(s.p50 - direct.p50),
            isDirect ? '' : signed(s.p99 - direct.p99),
          ];
        }),
      ),
    );
    // The issue's latency and throughput targets are for Gantry itself (and a build compared with it);
    // the limits targets have their own verdicts below.
    for (const n of gantryHere.filter((name) => !isLimited(name))) {
      const s = lat.get(n) as Summary;
      verdicts.push({
        target: n,
        metric: 'added latency p50, c=1 (ms)',
        value: s.p50 - direct.p50,
        limit: `<= ${TARGETS.addedP50Ms} ms`,
        pass: s.p50 - direct.p50 <= TARGETS.addedP50Ms,
      });
      verdicts.push({
        target: n,
        metric: 'added latency p99, c=1 (ms)',
        value: s.p99 - direct.p99,
        limit: `<= ${TARGETS.addedP99Ms} ms`,
        pass: s.p99 - direct.p99 <= TARGETS.addedP99Ms,
      });
    }
    json.latency = {
      concurrency: 1,
      summaries: Object.fromEntries(here.map((n) => [n, roundSummary(lat.get(n) as Summary)])),
      addedVsDirect: Object.fromEntries(
        here
          .filter((n) => n !== 'direct')
          .map((n) => [
            n,
            {
              p50: round3((lat.get(n) as Summary).p50 - direct.p50),
              p99: round3((lat.get(n) as Summary).p99 - direct.p99),
            },
          ]),
      ),
      perRound: Object.fromEntries(
        here.map((n) => [
          n,
          (runs.get('latency-c1')?.get(n) ?? []).map((r) => roundSummary(summarize(r.result.latency))),
        ]),
      ),
    };
  }

  // Throughput.
  const throughputJson: Record<string, unknown> = {};
  const tRows: string[][] = [];
  for (const c of settings.concurrency) {
    const id = `throughput-c${c}`;
    const here = namesIn(id);
    const gantryHere = gantryIn(id);
    const perRound = new Map(here.map((n) => [n, rpsPerRound(id, n)] as const));
    const bareRounds = perRound.get('bare') ?? [];
    for (const n of here) {
      const rounds = perRound.get(n) ?? [];
      const ratio = median(rounds.map((v, i) => (v / (bareRounds[i] ?? Number.NaN)) * 100));
      const s = pooled(id, n, 'latency');
      tRows.push([
        `c=${c}  ${n}`,
        int0(median(rounds)),
        `${int0(Math.min(...rounds))}-${int0(Math.max(...rounds))}`,
        n === 'direct' || n === 'bare' ? '' : `${ratio.toFixed(1)} %`,
        n === 'direct' ? '' : fmt(cpuPerRequestUs(id, n, 'cpuProxyMs'), 0),
        n.startsWith('gantry')
          ? `${((cpuPerRequestUs(id, 'bare', 'cpuProxyMs') / cpuPerRequestUs(id, n, 'cpuProxyMs')) * 100).toFixed(0)} %`
          : '',
        fmt(s.p50, 2),
        fmt(s.p99, 2),
        int0(newUpstreamConnections(id, n)),
      ]);
      if (n.startsWith('gantry') && !isLimited(n)) {
        verdicts.push({
          target: n,
          metric: `throughput c=${c}, % of bare proxy`,
          value: ratio,
          limit: `>= ${TARGETS.throughputPctOfBare} %`,
          pass: ratio >= TARGETS.throughputPctOfBare,
        });
      }
    }
    throughputJson[`c${c}`] = {
      concurrency: c,
      rpsMedian: Object.fromEntries(here.map((n) => [n, Math.round(median(perRound.get(n) ?? []))])),
      rpsPerRound: Object.fromEntries(
        here.map((n) => [n, (perRound.get(n) ?? []).map((v) => Math.round(v))]),
      ),
      pctOfBare: Object.fromEntries(
        gantryHere.map((n) => [
          n,
          round3(median((perRound.get(n) ?? []).map((v, i) => (v / (bareRounds[i] ?? Number.NaN)) * 100))),
        ]),
      ),
      cpuBoundPctOfBare: Object.fromEntries(
        gantryHere.map((n) => [
          n,
          round3((cpuPerRequestUs(id, 'bare', 'cpuProxyMs') / cpuPerRequestUs(id, n, 'cpuProxyMs')) * 100),
        ]),
      ),
      cpuUsPerRequest: Object.fromEntries(
        here.map((n) => [
          n,
          {
            proxy: n === 'direct' ? null : round3(cpuPerRequestUs(id, n, 'cpuProxyMs')),
            upstream: round3(cpuPerRequestUs(id, n, 'cpuUpstreamMs')),
            bench: round3(cpuPerRequestUs(id, n, 'cpuBenchMs')),
          },
        ]),
      ),
      latency: Object.fromEntries(here.map((n) => [n, roundSummary(pooled(id, n, 'latency'))])),
      newUpstreamConnections: Object.fromEntries(here.map((n) => [n, newUpstreamConnections(id, n)])),
    };
  }
  if (tRows.length > 0)
    out.push(
      table(
        `Non-streaming throughput (req/s: median of ${settings.rounds} round(s) of ${settings.throughputMs} ms; CPU us/req: the proxy process's CPU per request; bare CPU / CPU: the req/s ratio if both were CPU-bound)`,
        [
          'concurrency  target',
          'req/s',
          'min-max',
          '% of bare',
          'CPU us/req',
          'bare CPU / CPU',
          'p50 ms',
          'p99 ms',
          'new upstream conns',
        ],
        tRows,
      ),
    );
  json.throughput = throughputJson;

  // Streaming.
  const streamJson: Record<string, unknown> = {};
  const sRows: string[][] = [];
  const streamCs = settings.phases.includes('stream') ? [1, ...settings.streamConcurrency] : [];
  for (const c of streamCs) {
    const id = `stream-c${c}`;
    const here = namesIn(id);
    const ttfc = new Map(here.map((n) => [n, pooled(id, n, 'ttfc')] as const));
    const total = new Map(here.map((n) => [n, pooled(id, n, 'latency')] as const));
    const bareTtfc = ttfc.get('bare') as Summary;
    for (const n of here) {
      const t = ttfc.get(n) as Summary;
      const s = total.get(n) as Summary;
      const rps = c === 1 ? Number.NaN : median(rpsPerRound(id, n));
      sRows.push([
        `c=${c}  ${n}`,
        fmt(t.p50),
        fmt(t.p99),
        n === 'direct' || n === 'bare' ? '' : signed(t.p50 - bareTtfc.p50),
        fmt(s.p50),
        fmt(s.p99),
        c === 1 ? '' : int0(rps),
        n === 'direct' ? '' : fmt(cpuPerRequestUs(id, n, 'cpuProxyMs'), 0),
        int0(newUpstreamConnections(id, n)),
      ]);
      if (c === 1 && n.startsWith('gantry')) {
        verdicts.push({
          target: n,
          metric: 'TTFC p50 vs bare proxy, c=1 (ms)',
          value: t.p50 - bareTtfc.p50,
          limit: `<= +${TARGETS.ttfcVsBareMs} ms`,
          pass: t.p50 - bareTtfc.p50 <= TARGETS.ttfcVsBareMs,
        });
      }
    }
    streamJson[`c${c}`] = {
      concurrency: c,
      ttfc: Object.fromEntries(here.map((n) => [n, roundSummary(ttfc.get(n) as Summary)])),
      total: Object.fromEntries(here.map((n) => [n, roundSummary(total.get(n) as Summary)])),
      ttfcP50VsBare: Object.fromEntries(
        here.map((n) => [n, round3((ttfc.get(n) as Summary).p50 - bareTtfc.p50)]),
      ),
      streamsPerSecond:
        c === 1 ? null : Object.fromEntries(here.map((n) => [n, Math.round(median(rpsPerRound(id, n)))])),
      newUpstreamConnections: Object.fromEntries(here.map((n) => [n, newUpstreamConnections(id, n)])),
      cpuUsPerStream: Object.fromEntries(
        here.filter((n) => n !== 'direct').map((n) => [n, round3(cpuPerRequestUs(id, n, 'cpuProxyMs'))]),
      ),
    };
  }
  if (sRows.length > 0)
    out.push(
      table(
        `Streaming (${settings.chunks} content chunks, gap ${settings.gapMs} ms; TTFC = request start to first content chunk; ms)`,
        [
          'concurrency  target',
          'TTFC p50',
          'TTFC p99',
          'TTFC p50 vs bare',
          'total p50',
          'total p99',
          'streams/s',
          'CPU us/stream',
          'new upstream conns',
        ],
        sRows,
      ),
    );
  json.streaming = streamJson;

  // Limits and metering: gantry-limits and gantry-redis against gantry, from the same interleaved rounds.
  const limitNames = (['gantry', 'gantry-limits', 'gantry-redis'] as const).filter((n) =>
    namesIn('latency-c1').includes(n),
  );
  const limitsJson: Record<string, unknown> = {
    ceilings: CEILINGS,
    defaultBalance: DEFAULT_BALANCE,
    phases: settings.limitsPhases ?? 'all',
    ...(redisSkipped ? { redisSkipped } : {}),
  };
  if (limitNames.length > 1) {
    const lat = (n: TargetName) => pooled('latency-c1', n, 'latency');
    const base = lat('gantry');
    const direct = lat('direct');
    const roundP50 = (n: TargetName) =>
      (runs.get('latency-c1')?.get(n) ?? []).map((r) => summarize(r.result.latency).p50);
    const baseRounds = roundP50('gantry');
    // CPU per request where the limits targets ran under load (the first throughput phase they took part in).
    const cpuPhase = settings.concurrency
      .map((c) => `throughput-c${c}`)
      .find((id) => namesIn(id).includes('gantry-limits') || namesIn(id).includes('gantry-redis'));
    const cpuLabel = cpuPhase ? cpuPhase.replace('throughput-', '') : '';
    const redisCpu = cpuPhase !== undefined && namesIn(cpuPhase).includes('gantry-redis');
    const rows = limitNames.map((n) => {
      const s = lat(n);
      const deltas = roundP50(n).map((v, i) => v - (baseRounds[i] ?? Number.NaN));
      const isBase = n === 'gantry';
      const row = [
        n,
        fmt(s.p50),
        fmt(s.p99),
        signed(s.p50 - direct.p50),
        isBase ? '' : signed(s.p50 - base.p50),
        isBase ? '' : signed(s.p99 - base.p99),
        isBase ? '' : deltas.map((d) => signed(d)).join(' '),
      ];
      if (cpuPhase) {
        row.push(namesIn(cpuPhase).includes(n) ? fmt(cpuPerRequestUs(cpuPhase, n, 'cpuProxyMs'), 0) : '');
      }
      if (redisCpu)
        row.push(n === 'gantry-redis' ? fmt(cpuPerRequestUs(cpuPhase, n, 'cpuSidecarMs'), 0) : '');
      return row;
    });
    out.push(
      table(
        'Limits and metering: gantry-limits = tier ceilings on the account and model buckets (concurrency, ' +
          'requests, input and output tokens; never reached), a billable price and credits, in-process; ' +
          'gantry-redis = the same on Redis. Added vs gantry (no ceilings, free model) at c=1, pooled; ' +
          `per-round = each round's p50 difference (ms)`,
        [
          'target',
          'p50',
          'p99',
          'added p50 vs direct',
          'added p50 vs gantry',
          'added p99 vs gantry',
          'per-round p50 vs gantry',
          ...(cpuPhase ? [`CPU us/req ${cpuLabel}`] : []),
          ...(redisCpu ? [`redis-server CPU us/req ${cpuLabel}`] : []),
        ],
        rows,
      ),
    );
    const added: Record<string, unknown> = {};
    for (const n of limitNames.filter((x) => x !== 'gantry')) {
      const s = lat(n);
      added[n] = {
        p50: round3(s.p50 - base.p50),
        p99: round3(s.p99 - base.p99),
        perRoundP50: roundP50(n).map((v, i) => round3(v - (baseRounds[i] ?? Number.NaN))),
        ...(cpuPhase && namesIn(cpuPhase).includes(n)
          ? {
              cpuUsPerRequest: {
                phase: cpuPhase,
                gantry: round3(cpuPerRequestUs(cpuPhase, n, 'cpuProxyMs')),
                baseline: round3(cpuPerRequestUs(cpuPhase, 'gantry', 'cpuProxyMs')),
                ...(n === 'gantry-redis'
                  ? { redisServer: round3(cpuPerRequestUs(cpuPhase, n, 'cpuSidecarMs')) }
                  : {}),
              },
            }
          : {}),
      };
      const limit = n === 'gantry-limits' ? TARGETS.limitsAddedP50Ms : TARGETS.redisAddedP50Ms;
      verdicts.push({
        target: n,
        metric: `${n === 'gantry-limits' ? 'limits' : 'redis'} added p50 vs gantry, c=1 (ms)`,
        value: s.p50 - base.p50,
        limit: `<= ${limit} ms`,
        pass: s.p50 - base.p50 <= limit,
      });
    }
    limitsJson.addedVsGantry = added;
  }
  if (redisCount) {
    const n = redisCount.requests;
    const per = (calls: number) => (n > 0 ? calls / n : Number.NaN);
    const total = redisCount.commands.reduce((sum, c) => sum + c.calls, 0);
    const admits = redisCount.commands.filter((c) => c.label === 'limiter admit');
    const admitCalls = admits.reduce((sum, c) => sum + c.calls, 0);
    const requestPath = redisCount.commands.filter((c) => c.admission).reduce((sum, c) => sum + c.calls, 0);
    const rows = redisCount.commands.map((c) => [
      c.command,
      c.label,
      c.when,
      int0(c.calls),
      fmt(per(c.calls)),
    ]);
    rows.push(['', 'request path (admission)', '', int0(requestPath), fmt(per(requestPath))]);
    rows.push(['', 'all commands', '', int0(total), fmt(per(total))]);
    const fmtCounts = (r: Record<string, number>) =>
      Object.entries(r)
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => `${k.toLowerCase()} ${int0(v)}`)
        .join(', ') || 'none';
    out.push(
      `${table(
        `Redis commands sent by gantry-redis (${int0(n)} non-streaming requests at c=1 under MONITOR, ` +
          `${(redisCount.windowMs / 1000).toFixed(1)} s window incl. 2 x 0.75 s idle for the usage flushes; ` +
          `each command is one round trip; ${redisCount.connections} connections)`,
        ['command', 'what', 'when', 'calls', 'per request'],
        rows,
        3,
      )}
` +
        `  run inside those scripts (not round trips): ${fmtCounts(redisCount.insideScripts)}
` +
        `  INFO commandstats over the same window (scripts' inner commands included): ${fmtCounts(redisCount.commandstats)}`,
    );
    verdicts.push({
      target: 'gantry-redis',
      metric: 'Redis round trips per admission (limiter)',
      value: per(admitCalls),
      limit: `<= ${TARGETS.redisRoundTripsPerAdmission}`,
      pass: per(admitCalls) <= TARGETS.redisRoundTripsPerAdmission,
      display: fmt(per(admitCalls)),
    });
    limitsJson.redisCommands = {
      ...redisCount,
      windowMs: round3(redisCount.windowMs),
      perRequest: {
        admission: round3(per(admitCalls)),
        requestPath: round3(per(requestPath)),
        all: round3(per(total)),
      },
    };
  }
  if (redisSkipped) out.push(`\n!!! ${redisSkipped}`);
  json.limits = limitsJson;

  // Memory.
  out.push(
    table(
      'Memory (resident set)',
      ['process', 'peak (VmHWM)', 'at end (VmRSS)', 'after warm-up'],
      [
        ['gantry', mb(memory.gantry?.peakRss), mb(memory.gantry?.rss), mb(memory.gantryAfterWarmup?.rss)],
        ...(gantryB ? [['gantry-b', mb(memory.gantryB?.peakRss), mb(memory.gantryB?.rss), '']] : []),
        ...(gantryLimits
          ? [['gantry-limits', mb(memory.gantryLimits?.peakRss), mb(memory.gantryLimits?.rss), '']]
          : []),
        ...(gantryRedis
          ? [['gantry-redis', mb(memory.gantryRedis?.peakRss), mb(memory.gantryRedis?.rss), '']]
          : []),
        ...(redisPid
          ? [['redis-server', mb(memory.redisServer?.peakRss), mb(memory.redisServer?.rss), '']]
          : []),
        ['bare proxy', mb(memory.bare?.peakRss), mb(memory.bare?.rss), ''],
        ['upstream', mb(memory.upstream?.peakRss), mb(memory.upstream?.rss), ''],
      ],
    ),
  );
  json.memory = memory;

  if (anthropicLane) {
    json.anthropic = anthropicLane.json;
    errors.push(...anthropicLane.errors.map((e) => `anthropic: ${e}`));
  }
  if (safetyLane) {
    json.safety = safetyLane.json;
    errors.push(...safetyLane.errors.map((e) => `safety: ${e}`));
  }
  if (predictions) {
    json.predictions = predictions.json;
    verdicts.push(...predictions.verdicts);
    errors.push(...predictions.errors.map((e) => `predictions: ${e}`));
  }
  // Targets.
  out.push(
    table(
      'Targets',
      ['target', 'metric', 'result', 'limit', 'verdict'],
      verdicts.map((v) => [
        v.target,
        v.metric,
        v.display ?? (v.metric.includes('%') ? `${v.value.toFixed(1)} %` : signed(v.value)),
        v.limit,
        v.pass ? 'PASS' : 'MISS',
      ]),
    ),
  );
  json.verdicts = verdicts.map((v) => ({ ...v, value: round3(v.value) }));
  json.errors = errors;
  if (errors.length > 0) {
    out.push(`\nWARNING: requests failed, the numbers above are not trustworthy:\n  ${errors.join('\n  ')}`);
  }
  process.stdout.write(`${out.join('\n')}\n`);

  // Stop everything (Gantry writes its CPU profile on its way out).
  for (const pool of openPools) await pool.close().catch(() => undefined);
  const profiled =
    { gantry, 'gantry-limits': gantryLimits, 'gantry-redis': gantryRedis }[settings.profileTarget] ?? gantry;
  await stopChild(profiled, settings.profile ? 15_000 : 5_000);
  let profile: ProfileSummary | undefined;
  if (settings.profile) {
    const file = readdirSync(profileDir).find((f) => f.endsWith('.cpuprofile'));
    if (file) {
      profile = summarizeProfile(join(profileDir, file), 30);
      process.stdout.write(`\n${formatProfile({ ...profile, file: relative(ROOT, profile.file) })}\n`);
    } else {
      process.stdout.write('\n(no CPU profile was written by Gantry)\n');
    }
  }
  await cleanup();

  json.durationS = Math.round((Date.now() - started) / 100) / 10;
  if (profile) json.profile = { ...profile, file: relative(ROOT, profile.file) };
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(settings.out, toJsonText(json));
  log(`results written to ${relative(ROOT, settings.out)} (${json.durationS} s in all)`);
  return errors.length > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  async (err: unknown) => {
    if (interrupted) return; // the signal handler is already cleaning up and will exit
    process.stderr.write(
      `bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    await cleanup().catch(() => undefined);
    process.exit(1);
  },
);
