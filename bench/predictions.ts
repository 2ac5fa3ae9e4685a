/**
 * The `predictions` phase of `npm run bench` (bench/run.ts calls runPredictionsPhase;
 * `BENCH_PHASES=predictions` runs it alone, under a minute): the Predictions API on the built-in local
 * image model (`gantry/local-image`, 64x64 png: about 2 ms of generation), in two modes:
 *
 * - `embedded`: the compiled Gantry with no Redis (SQLite store, in-process queue and bus);
 * - `distributed`: the same with REDIS_URL to a throwaway redis-server (bench/redis-server.ts), one
 *   process with `--role all`: API and worker in one process, but everything between them goes through
 *   Redis (Redis store, BullMQ queue, pub/sub bus). Skipped with a warning when redis-server is missing.
 *
 * Measured, the modes taking turns:
 * 1. create latency at concurrency 1: POST /v1/predictions (no await, no webhook), one prediction at a
 *    time: after each create the bench waits until Gantry counts it finished (gantry_predictions_total
 *    on /metrics, polled every millisecond), so the worker always keeps up and the create is timed
 *    alone, with only its own prediction's work running beside it;
 * 2. create throughput at concurrency 16 and 32 (embedded), closed loop over a fixed window: creates/s,
 *    and, read from /metrics at the window's edges, how many predictions finished in that window. The
 *    worker shares the process and falls behind: the table says by how much (backlog at the end, time to
 *    drain it, end-to-end predictions/s including the drain);
 * 3. completion → notice, one prediction at a time (c=1), then 8 at a time (closed loop: a busy Gantry),
 *    three kinds in turn:
 *    - webhook with the URL only (every event: prediction.started, then prediction.succeeded),
 *    - webhook with `events: ["completed"]` (prediction.succeeded only),
 *    - `stream: true`, GET …/stream opened as soon as the create answers;
 *    each: arrival of prediction.succeeded (webhook) or of the `done` event (SSE) at the bench, minus the
 *    prediction's `completed_at`. The webhook receiver is node:http in the bench process; arrival times
 *    are epoch ms with sub-ms resolution (EpochClock). completed_at has ms precision (Date.now() in
 *    Gantry, truncated), so the figures read up to 1 ms high (0.5 ms on average). Streams whose headers
 *    arrived after completed_at (too late to see it live) are left out and counted. Each webhook
 *    delivery's own log (GET …/webhooks) splits the time: completion → delivery record → attempt.
 *
 * 4. Redis commands per prediction (distributed): a few more predictions (create, run, done; no webhook)
 *    under MONITOR, apart from the timed runs (bench/lib/redis-count.ts), grouped by command and key.
 *
 * Gantry's data dirs (SQLite, output files) go to /dev/shm when it exists (removing thousands of output
 * files from a slow disk took longer than the phase), BENCH_PRED_DATA_DIR elsewhere.
 *
 * Settings (environment):
 *   BENCH_PRED_MODES             embedded,distributed (default both)
 *   BENCH_PRED_SIZE              width and height of the image (64)
 *   BENCH_PRED_CREATE_REQUESTS   measured creates at c=1 per mode, after 30 warm-up (200, quick 100)
 *   BENCH_PRED_CONCURRENCY       create throughput concurrencies (16,32; empty for none)
 *   BENCH_PRED_THROUGHPUT_MODES  modes measured at those concurrencies (embedded)
 *   BENCH_PRED_THROUGHPUT_MS     measured window per concurrency (1000, quick 600), after 300 ms warm-up
 *   BENCH_PRED_SAMPLES           predictions per kind, mode and concurrency in the completion → notice runs
 *                                (100, quick 30)
 *   BENCH_PRED_NOTICE_CONCURRENCY  predictions in flight in those runs, one run each (1,8)
 *   BENCH_PRED_REDIS_COUNT       predictions counted under MONITOR (distributed; 40, quick 20; 0 skips it)
 *   BENCH_PRED_DATA_DIR          where Gantry's data dirs go (/dev/shm, else the OS temp dir)
 *   BENCH_PRED_PROFILE           embedded or distributed: the Gantry that --profile runs under --cpu-prof
 *                                (when other phases run too, --profile applies here only if this is set)
 */

import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import {
  adoptPid,
  type Child,
  type Memory,
  ORPHAN_GUARD,
  readCpuMs,
  readMemory,
  startChild,
  stopChild,
} from './lib/children.js';
import { envInt, envIntList, envItems, gantryNodeFlags } from './lib/env.js';
import { cpuProfFlags, startGantryChild } from './lib/gantry-child.js';
import { createDispatcher, drive, type PhaseResult, type RequestSpec } from './lib/load.js';
import { EpochClock, WebhookReceiver, watchStream } from './lib/prediction-clients.js';
import { formatProfile, type ProfileSummary, summarizeProfile } from './lib/profile.js';
import { countRedisCommands, type RedisCount, scriptNames } from './lib/redis-count.js';
import { round3, roundSummary, type Summary, summarize } from './lib/stats.js';
import { int0, table } from './lib/table.js';

export const PREDICTION_TARGETS = {
  /** POST /v1/predictions p50 at concurrency 1, embedded (under). */
  createP50Ms: 5,
  /** completed_at → arrival of the prediction.succeeded webhook, median (under). */
  webhookP50Ms: 50,
};

export interface PredictionsPhaseOptions {
  root: string;
  quick: boolean;
  /** --profile was given. */
  profile: boolean;
  /** This phase runs alone (then --profile applies to it without BENCH_PRED_PROFILE). */
  alone: boolean;
  gantryBin: string;
  /** false: leave out the distributed mode (BENCH_REDIS=0). */
  redis: boolean;
  redisServer: string;
  log: (msg: string) => void;
}

/** The same shape as run.ts's verdicts, so they join its Targets table. */
export interface PredictionVerdict {
  target: string;
  metric: string;
  value: number;
  limit: string;
  pass: boolean;
  display?: string;
}

export interface PredictionsPhaseResult {
  json: Record<string, unknown>;
  verdicts: PredictionVerdict[];
  errors: string[];
}

type ModeName = 'embedded' | 'distributed';
type Kind = 'webhook-all' | 'webhook-completed' | 'sse';
const KINDS: readonly Kind[] = ['webhook-all', 'webhook-completed', 'sse'];
const KIND_LABEL: Record<Kind, string> = {
  'webhook-all': 'webhook, URL only (all events)',
  'webhook-completed': 'webhook, events [completed]',
  sse: 'SSE done (stream opened after create)',
};
const MODEL = 'gantry/local-image';
const NOTICE_TIMEOUT_MS = 20_000;
/** A notice run stops after this many failed predictions (each may have waited NOTICE_TIMEOUT_MS). */
const MAX_NOTICE_ERRORS = 10;
/** Gantry's webhook deliverer re-queues a delivery this long when an earlier event is still pending. */
const ORDER_WAIT_MS = 50;

interface Mode {
  name: ModeName;
  child: Child;
  origin: string;
  /** Creates and reads of the notice run and sanity check. */
  api: Pool;
  /** SSE streams: one connection each while open. */
  streams: Pool;
  /** /metrics, one connection. */
  metrics: Pool;
  /** Predictions this bench created on it so far (all finish; the drain waits for them). */
  created: number;
  /** redis-server's pid (distributed), whose CPU is counted too. */
  sidecarPid?: number;
  /** Gantry's resident set at the end of the phase. */
  memory?: Memory;
}

// ---------------------------------------------------------------------------------------------- settings

const env = process.env;

function names<T extends string>(name: string, allowed: readonly T[], fallback: T[]): T[] {
  const out = envItems(name);
  if (out === undefined) return fallback;
  const bad = out.filter((s) => !allowed.includes(s as T));
  if (bad.length > 0) throw new Error(`${name}: unknown ${bad.join(', ')} (use ${allowed.join(', ')})`);
  return out as T[];
}

function readSettings(quick: boolean) {
  const modes: readonly ModeName[] = ['embedded', 'distributed'];
  return {
    modes: names('BENCH_PRED_MODES', modes, ['embedded', 'distributed']),
    size: envInt('BENCH_PRED_SIZE', 64, 64, 2048),
    createWarmup: 30,
    createRequests: envInt('BENCH_PRED_CREATE_REQUESTS', quick ? 100 : 200, 10, 1_000_000),
    concurrency: envIntList('BENCH_PRED_CONCURRENCY', [16, 32], 1024),
    throughputModes: names('BENCH_PRED_THROUGHPUT_MODES', modes, ['embedded']),
    throughputWarmupMs: 300,
    throughputMs: envInt('BENCH_PRED_THROUGHPUT_MS', quick ? 600 : 1_000, 100, 600_000),
    samples: envInt('BENCH_PRED_SAMPLES', quick ? 30 : 100, 5, 100_000),
    noticeConcurrency: envIntList('BENCH_PRED_NOTICE_CONCURRENCY', [1, 8], 1024),
    redisCountPredictions: envInt('BENCH_PRED_REDIS_COUNT', quick ? 20 : 40, 0, 100_000),
    dataDir: env.BENCH_PRED_DATA_DIR || (existsSync('/dev/shm') ? '/dev/shm' : tmpdir()),
    profileMode: names('BENCH_PRED_PROFILE', modes, ['embedded'])[0] ?? 'embedded',
    profileSet: env.BENCH_PRED_PROFILE !== undefined && env.BENCH_PRED_PROFILE !== '',
    /** Longest wait for the worker to finish what the bench created. */
    drainTimeoutMs: 120_000,
  };
}

// ------------------------------------------------------------------------------------------------ gantry

function gantryYaml(): string {
  return `# Written by bench/predictions.ts for one run: the embedded default's local backend and image model,
# webhooks allowed to 127.0.0.1 (the bench's receiver), no tier ceilings.
server:
  host: 127.0.0.1
  port: 0
  log_level: warn
providers:
  local:
    kind: local
tiers:
  default: {}
models:
  - namespace: ${MODEL}
    name: Local image (bench)
    type: image
    vendor: { name: Gantry, slug: gantry }
    billable: false
    serves: [predictions]
    routes:
      - provider: local
        model: local-image
predictions:
  webhooks: { allow_private: true }
`;
}

const API_KEY = `gty_bench_${randomBytes(24).toString('base64url')}`;
const HEADERS = {
  'content-type': 'application/json',
  accept: 'application/json',
  authorization: `Bearer ${API_KEY}`,
  'user-agent': 'gantry-bench/0.1',
};

// --------------------------------------------------------------------------------------------- helpers

interface PredictionJson {
  id?: string;
  status?: string;
  output?: unknown;
  created_at?: string;
  completed_at?: string | null;
}

async function call<T>(
  pool: Pool,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
): Promise<{ status: number; json: T; text: string }> {
  const res = await pool.request({
    method,
    path,
    headers: HEADERS,
    ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
  const text = await res.body.text();
  let json: T;
  try {
    json = JSON.parse(text) as T;
  } catch {
    json = {} as T;
  }
  return { status: res.statusCode, json, text };
}

/** Predictions finished on this Gantry (any terminal status), and how many of them did not succeed. */
async function finishedCount(mode: Mode): Promise<{ done: number; failed: number }> {
  const res = await mode.metrics.request({ method: 'GET', path: '/metrics' });
  const text = await res.body.text();
  let done = 0;
  let failed = 0;
  for (const m of text.matchAll(/^gantry_predictions_total\{([^}]*)\} (\d+(?:\.\d+)?)$/gm)) {
    const n = Number(m[2]);
    done += n;
    if (!/status="succeeded"/.test(m[1] ?? '')) failed += n;
  }
  return { done, failed };
}

/**
 * Waits until every prediction the bench created has finished; returns the time it took (ms). Each look
 * at /metrics costs Gantry 2-3 ms of CPU, hence the 50 ms between looks.
 */
async function drain(mode: Mode, timeoutMs: number, pollMs = 50): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const { done } = await finishedCount(mode);
    if (done >= mode.created) return performance.now() - t0;
    if (performance.now() - t0 > timeoutMs)
      throw new Error(
        `${mode.name}: ${mode.created - done} predictions still unfinished after ${timeoutMs} ms`,
      );
    await sleep(pollMs);
  }
}

function cpuOf(mode: Mode): { gantry: number; sidecar: number } {
  return {
    gantry: readCpuMs(mode.child.pid),
    sidecar: mode.sidecarPid ? readCpuMs(mode.sidecarPid) : 0,
  };
}

const fmt = (n: number, digits = 2) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');

// ------------------------------------------------------------------------------------------ measurements

interface CreateRun {
  concurrency: number;
  latency: Summary;
  /** Creates/s over the measured part. */
  createsPerSecond: number;
  /** Predictions finished per second in the measured window (c>1). */
  completionsPerSecond: number;
  /** Created but unfinished when the last create was answered (c>1). */
  backlogAtEnd: number;
  /** From the last create's answer until everything created had finished (c>1). */
  drainMs: number;
  /** Predictions of the run (warm-up included) / (run time + drain): what the process sustains (c>1). */
  endToEndPerSecond: number;
  /** CPU of Gantry (and redis-server) per prediction over the run and its drain (ms; c>1). */
  cpuMsPerPrediction: number;
  sidecarCpuMsPerPrediction: number;
  creates: number;
  errors: number;
  errorSamples: string[];
}

/** Polls GET /v1/predictions/{id} (under a millisecond of Gantry's CPU; /metrics costs 2-3) until it ends. */
async function waitFinished(mode: Mode, id: string, timeoutMs: number): Promise<string> {
  const t0 = performance.now();
  for (;;) {
    await sleep(2);
    const got = await call<PredictionJson>(mode.api, 'GET', `/v1/predictions/${id}`);
    const status = String(got.json.status);
    if (['succeeded', 'failed', 'canceled'].includes(status)) return status;
    if (performance.now() - t0 > timeoutMs)
      throw new Error(`${mode.name}: prediction ${id} still ${status} after ${timeoutMs} ms`);
  }
}

/** Concurrency 1, one prediction at a time: create (timed), then wait until Gantry has finished it. */
async function createsOneAtATime(mode: Mode, body: Buffer, warmup: number, requests: number) {
  await drain(mode, 60_000);
  const latency: number[] = [];
  const errorSamples: string[] = [];
  let errors = 0;
  const started = performance.now();
  for (let i = 0; i < warmup + requests && errors < 10; i++) {
    const t0 = performance.now();
    const res = await call<PredictionJson>(mode.api, 'POST', '/v1/predictions', body.toString());
    const ms = performance.now() - t0;
    if (res.status !== 200 || res.json.status !== 'starting' || typeof res.json.id !== 'string') {
      errors++;
      if (errorSamples.length < 5) errorSamples.push(`HTTP ${res.status}: ${res.text.slice(0, 200)}`);
      continue;
    }
    mode.created++;
    if (i >= warmup) latency.push(ms);
    const status = await waitFinished(mode, res.json.id, 10_000);
    if (status !== 'succeeded') {
      errors++;
      if (errorSamples.length < 5) errorSamples.push(`prediction ${res.json.id} ${status}`);
    }
  }
  const wallMs = performance.now() - started;
  return {
    concurrency: 1,
    latency: summarize(latency),
    createsPerSecond: ((warmup + requests) * 1000) / wallMs,
    completionsPerSecond: Number.NaN,
    backlogAtEnd: 0,
    drainMs: 0,
    endToEndPerSecond: ((warmup + requests) * 1000) / wallMs,
    cpuMsPerPrediction: Number.NaN,
    sidecarCpuMsPerPrediction: Number.NaN,
    creates: latency.length,
    errors,
    errorSamples,
  } satisfies CreateRun;
}

/** Closed loop at concurrency c for a time window; the worker runs beside it and the drain follows. */
async function createThroughput(
  mode: Mode,
  spec: RequestSpec,
  concurrency: number,
  warmupMs: number,
  durationMs: number,
  drainTimeoutMs: number,
): Promise<CreateRun> {
  await drain(mode, drainTimeoutMs);
  const pool = createDispatcher(mode.origin, concurrency);
  try {
    const cpu0 = cpuOf(mode);
    const t0 = performance.now();
    // The number finished at the window's edges, read while the load runs.
    const at = (ms: number) =>
      sleep(ms).then(() => finishedCount(mode).then((c) => ({ done: c.done, t: performance.now() })));
    const edges = Promise.all([at(warmupMs), at(warmupMs + durationMs)]);
    const result: PhaseResult = await drive(pool, spec, {
      kind: 'time',
      concurrency,
      warmupMs,
      durationMs,
    });
    const [a, b] = await edges;
    mode.created += result.completedAll;
    const after = await finishedCount(mode);
    const backlogAtEnd = Math.max(0, mode.created - after.done);
    const drainMs = await drain(mode, drainTimeoutMs);
    const totalMs = performance.now() - t0;
    const cpu1 = cpuOf(mode);
    const n = Math.max(1, result.completedAll);
    return {
      concurrency,
      latency: summarize(result.latency),
      createsPerSecond: (result.completed * 1000) / result.windowMs,
      completionsPerSecond: ((b.done - a.done) * 1000) / (b.t - a.t),
      backlogAtEnd,
      drainMs: backlogAtEnd > 0 ? drainMs : 0,
      endToEndPerSecond: (result.completedAll * 1000) / totalMs,
      cpuMsPerPrediction: (cpu1.gantry - cpu0.gantry) / n,
      sidecarCpuMsPerPrediction: (cpu1.sidecar - cpu0.sidecar) / n,
      creates: result.completedAll,
      errors: result.errors,
      errorSamples: result.errorSamples,
    };
  } finally {
    await pool.close();
  }
}

interface NoticeSample {
  kind: Kind;
  id: string;
  /** POST /v1/predictions answer time (ms). */
  createMs: number;
  /** completed_at − created_at (ms): queue wait and run. */
  runMs: number;
  /** Arrival at the bench − completed_at (ms). */
  noticeMs: number;
  /** SSE: the stream's headers arrived before completed_at (it saw the completion live). */
  live: boolean;
  completedAt: number;
}

interface DeliveryBreakdown {
  /** completed_at → the delivery record's created_at (ms): the webhook scheduled. */
  scheduledMs: number;
  /** the record's created_at → the attempt's start (ms): queue pick-up, order wait, reads, signing. */
  queuedMs: number;
  /** The attempt as Gantry logged it: the POST and reading the answer (ms). */
  attemptMs: number;
  /** Attempts made (1 when nothing was retried). */
  attempts: number;
}

interface NoticeRun {
  samples: NoticeSample[];
  breakdown: Map<Kind, DeliveryBreakdown[]>;
  errors: string[];
  /** Webhook deliveries received during the run, by event. */
  received: Record<string, number>;
  wallMs: number;
}

function noticeBody(kind: Kind, size: number, receiverUrl: string): Record<string, unknown> {
  const base = { model: MODEL, input: { prompt: 'bench', width: size, height: size, seed: 1 } };
  if (kind === 'sse') return { ...base, stream: true };
  if (kind === 'webhook-completed') return { ...base, webhook: { url: receiverUrl, events: ['completed'] } };
  return { ...base, webhook: { url: receiverUrl } };
}

/** `perKind` predictions of each kind, the kinds in turn, `concurrency` at a time, each followed to its notice. */
async function noticeRun(
  mode: Mode,
  receiver: WebhookReceiver,
  clock: EpochClock,
  perKind: number,
  concurrency: number,
  size: number,
): Promise<NoticeRun> {
  clock.anchor();
  const samples: NoticeSample[] = [];
  const errors: string[] = [];
  const countsBefore = new Map(receiver.counts);
  const one = async (kind: Kind): Promise<void> => {
    const t0 = performance.now();
    const created = await call<PredictionJson>(
      mode.api,
      'POST',
      '/v1/predictions',
      noticeBody(kind, size, receiver.url),
    );
    const createMs = performance.now() - t0;
    const id = created.json.id;
    if (created.status !== 200 || typeof id !== 'string') {
      errors.push(`${kind}: create HTTP ${created.status}: ${created.text.slice(0, 200)}`);
      return;
    }
    mode.created++;
    if (kind === 'sse') {
      const watch = await watchStream(
        mode.streams,
        `/v1/predictions/${id}/stream`,
        HEADERS,
        clock,
        NOTICE_TIMEOUT_MS,
      );
      const got = await call<PredictionJson>(mode.api, 'GET', `/v1/predictions/${id}`);
      const completedAt = Date.parse(String(got.json.completed_at));
      const createdAt = Date.parse(String(got.json.created_at));
      if (
        got.json.status !== 'succeeded' ||
        !watch.doneData.includes('"succeeded"') ||
        Number.isNaN(completedAt)
      ) {
        errors.push(`sse ${id}: status ${got.json.status}, done ${watch.doneData || '(none)'}`);
        return;
      }
      samples.push({
        kind,
        id,
        createMs,
        runMs: completedAt - createdAt,
        noticeMs: watch.doneAt - completedAt,
        live: watch.headersAt < completedAt,
        completedAt,
      });
      return;
    }
    const arrival = await receiver.waitFor(id, 'prediction.succeeded', NOTICE_TIMEOUT_MS);
    if (arrival?.status !== 'succeeded' || Number.isNaN(arrival.completedAt)) {
      errors.push(
        `${kind} ${id}: ${arrival ? `delivery with status ${arrival.status}` : 'no prediction.succeeded webhook'}`,
      );
      return;
    }
    samples.push({
      kind,
      id,
      createMs,
      runMs: arrival.completedAt - arrival.createdAt,
      noticeMs: arrival.at - arrival.completedAt,
      live: true,
      completedAt: arrival.completedAt,
    });
  };

  const started = performance.now();
  const total = perKind * KINDS.length;
  let next = 0;
  const loop = async () => {
    while (next < total && errors.length < MAX_NOTICE_ERRORS) {
      const kind = KINDS[next++ % KINDS.length] as Kind;
      await one(kind).catch((err: unknown) => void errors.push(`${kind}: ${(err as Error).message}`));
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const wallMs = performance.now() - started;
  // Let the last prediction's other deliveries land, then forget the ones nobody waited for (started).
  await sleep(100);
  receiver.forgetUnclaimed();
  const received: Record<string, number> = {};
  for (const [event, n] of receiver.counts) received[event] = n - (countsBefore.get(event) ?? 0);

  // Where the webhook time went: each delivery's own log, read after the run (not during it).
  const breakdown = new Map<Kind, DeliveryBreakdown[]>();
  const webhookSamples = samples.filter((s) => s.kind !== 'sse');
  for (let i = 0; i < webhookSamples.length; i += 8) {
    await Promise.all(
      webhookSamples.slice(i, i + 8).map(async (s) => {
        const got = await call<{
          data?: Array<{
            event: string;
            attempts: number;
            created_at: string;
            log: Array<{ at: string; ms: number }>;
          }>;
        }>(mode.api, 'GET', `/v1/predictions/${s.id}/webhooks`);
        const d = got.json.data?.find((x) => x.event === 'prediction.succeeded');
        const last = d?.log.at(-1);
        if (!d || !last) return;
        const recordAt = Date.parse(d.created_at);
        const list = breakdown.get(s.kind) ?? [];
        list.push({
          scheduledMs: recordAt - s.completedAt,
          queuedMs: Date.parse(last.at) - last.ms - recordAt,
          attemptMs: last.ms,
          attempts: d.attempts,
        });
        breakdown.set(s.kind, list);
      }),
    );
  }
  return { samples, breakdown, errors, received, wallMs };
}

interface RedisPerPrediction {
  predictions: number;
  /** Commands Gantry sent (each one round trip), per prediction. */
  roundTrips: number;
  /** Commands run inside Lua scripts, per prediction (not round trips). */
  insideScripts: number;
  /** By command and key pattern (ids replaced), heaviest first. */
  byKind: Array<{ command: string; key: string; perPrediction: number }>;
}

/** A key with its variable parts (uuids, BullMQ job numbers, delivery ids) replaced, to group commands by. */
function keyPattern(label: string): string {
  // redis-count.ts keeps the first 40 characters of a key: mark the cut ones.
  const cut = !label.startsWith('script on ') && label.length >= 40;
  const key = label
    .replace(/^script on /, '')
    .replace(/\{?[0-9a-f]{8}-[0-9a-f-]{0,28}\}?/g, '{id}')
    .replace(/acct_[0-9a-f]+/g, '{account}')
    .replace(/msg_[0-9a-f]+/g, '{delivery}')
    .replace(/:\d+(?=:|$)/g, ':{n}');
  return cut ? `${key}…` : key;
}

/** N predictions one after another (no webhook), then the drain: every Redis command they cost. */
async function countPerPrediction(
  mode: Mode,
  port: number,
  gantryBin: string,
  body: Buffer,
  n: number,
): Promise<RedisPerPrediction & { raw: RedisCount }> {
  await drain(mode, 60_000);
  const scripts = await scriptNames(gantryBin);
  // 750 ms idle on each side: the usage flush (every 250 ms) of these predictions falls inside.
  const raw = await countRedisCommands(port, scripts, 750, async () => {
    for (let i = 0; i < n; i++) {
      const res = await call<PredictionJson>(mode.api, 'POST', '/v1/predictions', body.toString());
      if (res.status !== 200) throw new Error(`redis count: create HTTP ${res.status}`);
      mode.created++;
    }
    await drain(mode, 60_000, 20); // /metrics sends nothing to Redis
    return n;
  });
  const grouped = new Map<string, { command: string; key: string; calls: number }>();
  let total = 0;
  for (const c of raw.commands) {
    total += c.calls;
    const key =
      c.label.startsWith('limiter') || c.label.startsWith('usage') || c.label.startsWith('credit')
        ? c.label
        : keyPattern(c.label);
    const id = `${c.command} ${key}`;
    const entry = grouped.get(id) ?? { command: c.command, key, calls: 0 };
    entry.calls += c.calls;
    grouped.set(id, entry);
  }
  const inside = Object.values(raw.insideScripts).reduce((a, b) => a + b, 0);
  return {
    predictions: n,
    roundTrips: total / n,
    insideScripts: inside / n,
    byKind: [...grouped.values()]
      .sort((a, b) => b.calls - a.calls)
      .map((g) => ({ command: g.command, key: g.key, perPrediction: round3(g.calls / n) })),
    raw,
  };
}

// ------------------------------------------------------------------------------------------------ sanity

/** One prediction with a stream and a webhook, checked field by field, so no mode wins by failing. */
async function sanityCheck(mode: Mode, receiver: WebhookReceiver, clock: EpochClock, size: number) {
  clock.anchor();
  const body = {
    model: MODEL,
    input: { prompt: 'bench', width: size, height: size, seed: 1 },
    stream: true,
    webhook: { url: receiver.url },
  };
  const created = await call<PredictionJson>(mode.api, 'POST', '/v1/predictions', body);
  const id = created.json.id;
  if (created.status !== 200 || typeof id !== 'string' || created.json.status !== 'starting')
    throw new Error(`${mode.name}: create answered HTTP ${created.status}: ${created.text.slice(0, 300)}`);
  mode.created++;
  const watch = await watchStream(
    mode.streams,
    `/v1/predictions/${id}/stream`,
    HEADERS,
    clock,
    NOTICE_TIMEOUT_MS,
  );
  const started = await receiver.waitFor(id, 'prediction.started', NOTICE_TIMEOUT_MS);
  const succeeded = await receiver.waitFor(id, 'prediction.succeeded', NOTICE_TIMEOUT_MS);
  const got = await call<PredictionJson>(mode.api, 'GET', `/v1/predictions/${id}`);
  const output = got.json.output;
  const problems: string[] = [];
  if (got.json.status !== 'succeeded') problems.push(`status ${got.json.status}`);
  if (!Array.isArray(output) || output.length !== 1 || typeof output[0] !== 'string')
    problems.push(`output ${JSON.stringify(output)}`);
  if (!watch.events.includes('done') || !watch.doneData.includes('"succeeded"'))
    problems.push(`stream events ${watch.events.join(',')} done ${watch.doneData}`);
  if (!started || !succeeded) problems.push(`webhooks started=${!!started} succeeded=${!!succeeded}`);
  if (succeeded && succeeded.completedAt !== Date.parse(String(got.json.completed_at)))
    problems.push('webhook completed_at differs from GET');
  if (Array.isArray(output) && typeof output[0] === 'string') {
    const url = new URL(output[0]);
    const file = await mode.api.request({ method: 'GET', path: `${url.pathname}${url.search}` });
    const bytes = Buffer.from(await file.body.arrayBuffer());
    const png = bytes.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    if (file.statusCode !== 200 || !png) problems.push(`output file HTTP ${file.statusCode}, png ${png}`);
  }
  if (problems.length > 0) throw new Error(`${mode.name}: sanity: ${problems.join('; ')}`);
}

// -------------------------------------------------------------------------------------------------- main

export async function runPredictionsPhase(options: PredictionsPhaseOptions): Promise<PredictionsPhaseResult> {
  const settings = readSettings(options.quick);
  const { log } = options;
  const phaseStarted = performance.now();
  const loadavgAtStart = loadavg().map((n) => round3(n));
  const errors: string[] = [];
  const verdicts: PredictionVerdict[] = [];
  const out: string[] = [];

  let distributedSkipped: string | undefined;
  let wanted = settings.modes;
  if (wanted.includes('distributed') && !options.redis) {
    distributedSkipped = 'BENCH_REDIS=0: the distributed mode is left out';
    wanted = wanted.filter((m) => m !== 'distributed');
  } else if (wanted.includes('distributed') && spawnSync(options.redisServer, ['--version']).status !== 0) {
    distributedSkipped = `${options.redisServer} is not installed (or does not run): the distributed mode is SKIPPED (apt-get install -y redis-server)`;
    process.stdout.write(`\n!!!\n!!! ${distributedSkipped}\n!!!\n\n`);
    wanted = wanted.filter((m) => m !== 'distributed');
  }
  if (wanted.length === 0) throw new Error('predictions: no mode to run (BENCH_PRED_MODES)');
  const profiling =
    options.profile && (options.alone || settings.profileSet) && wanted.includes(settings.profileMode);
  const profileDir = join(options.root, 'bench', 'results', 'profile-predictions');
  log(
    `predictions phase: ${wanted.join(' and ')}, ${MODEL} ${settings.size}x${settings.size} png, ` +
      `load average ${loadavgAtStart.join(' ')}` +
      `${profiling ? ` [profiling ${settings.profileMode}: its numbers are inflated]` : ''}`,
  );

  // Gantry's data (SQLite, output files): removed at the end of the phase, or when the bench exits.
  const dataDir = mkdtempSync(join(settings.dataDir, 'gantry-bench-predictions-'));
  const removeData = () => rmSync(dataDir, { recursive: true, force: true });
  process.on('exit', removeData);

  // Children: a redis-server for the distributed mode, and the Gantry of each mode.
  const children: Child[] = [];
  const configPath = join(dataDir, 'gantry.yaml');
  writeFileSync(configPath, gantryYaml());
  const { GANTRY_CONFIG: _c, REDIS_URL: _r, GANTRY_ROLE: _g, ...inherited } = process.env;
  if (profiling) {
    rmSync(profileDir, { recursive: true, force: true });
    mkdirSync(profileDir, { recursive: true });
  }
  const launch = (name: ModeName, redisPort?: number) => {
    const flags = [...gantryNodeFlags(join(options.root, 'package.json')), '--import', ORPHAN_GUARD];
    if (profiling && settings.profileMode === name)
      flags.push(...cpuProfFlags(profileDir, `predictions-${name}.cpuprofile`));
    return startGantryChild({
      name: `gantry-predictions-${name}`,
      cwd: options.root,
      nodeFlags: flags,
      bin: options.gantryBin,
      config: configPath,
      serveArgs: ['--role', 'all'],
      env: { ...inherited, ...(redisPort ? { REDIS_URL: `redis://127.0.0.1:${redisPort}` } : {}) },
      dataDir: join(dataDir, name),
      apiKey: API_KEY,
    });
  };
  // redis-server and the embedded Gantry at once; the distributed Gantry needs redis-server's port.
  const [redis, embedded] = await Promise.all([
    wanted.includes('distributed')
      ? startChild({
          name: 'redis-server (predictions)',
          args: ['--import', 'tsx', 'bench/redis-server.ts', '--server', options.redisServer],
          cwd: options.root,
          ready: 'ipc',
        })
      : undefined,
    wanted.includes('embedded') ? launch('embedded') : undefined,
  ]);
  const redisPid = redis && typeof redis.info.pid === 'number' ? redis.info.pid : undefined;
  if (redis) {
    children.push(redis);
    if (redisPid) adoptPid(redis, redisPid);
  }
  const distributed = redis ? await launch('distributed', redis.port) : undefined;
  const launched: Record<ModeName, Child | undefined> = { embedded, distributed };
  const keepAlive = { keepAliveTimeout: 60_000, keepAliveMaxTimeout: 60_000 };
  const modes: Mode[] = wanted.map((name) => {
    const child = launched[name] as Child;
    children.push(child);
    const origin = `http://127.0.0.1:${child.port}`;
    return {
      name,
      child,
      origin,
      api: new Pool(origin, { connections: 64, ...keepAlive }),
      streams: new Pool(origin, { connections: 256, ...keepAlive }),
      metrics: new Pool(origin, { connections: 1, ...keepAlive }),
      created: 0,
      ...(name === 'distributed' && redisPid ? { sidecarPid: redisPid } : {}),
    };
  });
  for (const m of modes) {
    log(
      `gantry-predictions-${m.name} :${m.child.port} (pid ${m.child.pid}, role all` +
        `${m.name === 'distributed' && redis ? `; redis-server ${String(redis.info.version)} :${redis.port}, pid ${redisPid}` : ''})`,
    );
  }

  const clock = new EpochClock();
  const receiver = await WebhookReceiver.start(clock);
  const createBody = Buffer.from(
    JSON.stringify({
      model: MODEL,
      input: { prompt: 'bench', width: settings.size, height: settings.size, seed: 1 },
    }),
  );
  const createSpec: RequestSpec = {
    path: '/v1/predictions',
    headers: HEADERS,
    body: createBody,
    stream: false,
  };
  const c1 = new Map<ModeName, CreateRun>();
  const throughput = new Map<string, CreateRun>();
  /** By `${mode} ${concurrency}`. */
  const notices = new Map<string, NoticeRun>();
  let profile: ProfileSummary | undefined;
  let redisCount: (RedisPerPrediction & { raw: RedisCount }) | undefined;
  try {
    // Sanity, then warm-up (JIT, connections, SQLite pages), none of it measured.
    for (const m of modes) await sanityCheck(m, receiver, clock, settings.size);
    log('sanity ok: create, worker, output file, stream `done` and both webhooks, on every mode');
    for (const m of modes) {
      const pool = createDispatcher(m.origin, 8);
      const r = await drive(pool, createSpec, { kind: 'count', concurrency: 8, warmup: 0, requests: 100 });
      await pool.close();
      m.created += r.completedAll;
      if (r.errors > 0) throw new Error(`warm-up ${m.name}: ${r.errorSamples.join('; ')}`);
      const w = await noticeRun(m, receiver, clock, 10, 1, settings.size);
      if (w.errors.length > 0) throw new Error(`warm-up ${m.name}: ${w.errors.slice(0, 3).join('; ')}`);
      await drain(m, settings.drainTimeoutMs);
    }
    log('warm-up done');

    // The modes take turns in each measurement.
    for (const m of modes) {
      c1.set(m.name, await createsOneAtATime(m, createBody, settings.createWarmup, settings.createRequests));
    }
    log('create c=1 done');
    for (const c of settings.noticeConcurrency) {
      for (const m of modes) {
        await drain(m, settings.drainTimeoutMs);
        notices.set(
          `${m.name} ${c}`,
          await noticeRun(m, receiver, clock, settings.samples, c, settings.size),
        );
      }
    }
    log('completion → webhook / SSE done');
    for (const c of settings.concurrency) {
      for (const m of modes.filter((x) => settings.throughputModes.includes(x.name))) {
        throughput.set(
          `${m.name} ${c}`,
          await createThroughput(
            m,
            createSpec,
            c,
            settings.throughputWarmupMs,
            settings.throughputMs,
            settings.drainTimeoutMs,
          ),
        );
      }
    }
    if (throughput.size > 0) log('create throughput done');
    const distributedMode = modes.find((m) => m.name === 'distributed');
    if (distributedMode && redis && settings.redisCountPredictions > 0) {
      redisCount = await countPerPrediction(
        distributedMode,
        redis.port,
        options.gantryBin,
        createBody,
        settings.redisCountPredictions,
      );
      log(`redis command count done (${settings.redisCountPredictions} predictions under MONITOR)`);
    }
    for (const m of modes) {
      const { failed } = await finishedCount(m);
      if (failed > 0) errors.push(`${m.name}: ${failed} predictions did not succeed`);
    }
  } finally {
    await receiver.close();
    for (const m of modes) {
      m.memory = readMemory(m.child.pid);
      await Promise.all([m.api.destroy(), m.streams.destroy(), m.metrics.destroy()]).catch(() => undefined);
    }
    // The Gantrys first (the distributed one says goodbye to Redis), then redis-server.
    const grace = profiling ? 15_000 : 5_000;
    await Promise.all(children.filter((c) => c !== redis).map((c) => stopChild(c, grace)));
    if (redis) await stopChild(redis, grace);
    removeData();
    process.off('exit', removeData);
  }
  if (profiling) {
    const file = readdirSync(profileDir).find((f) => f.endsWith('.cpuprofile'));
    if (file) profile = summarizeProfile(join(profileDir, file), 30);
  }
  const loadavgAtEnd = loadavg().map((n) => round3(n));

  // ---------------------------------------------------------------------------------------------- report
  const json: Record<string, unknown> = {
    model: MODEL,
    image: `${settings.size}x${settings.size} png`,
    modes: Object.fromEntries(
      modes.map((m) => [
        m.name,
        m.name === 'embedded'
          ? 'no Redis: SQLite store, in-process queue and bus; one process, role all'
          : 'REDIS_URL to a throwaway redis-server: Redis store, BullMQ queue, Redis pub/sub; one process, role all',
      ]),
    ),
    ...(distributedSkipped ? { distributedSkipped } : {}),
    settings: { ...settings, modes: wanted },
    targets: PREDICTION_TARGETS,
    loadavg: { start: loadavgAtStart, end: loadavgAtEnd },
  };

  // Creates.
  const createRows: string[][] = [];
  const createJson: Record<string, Record<string, unknown>> = {};
  const addCreateRow = (name: ModeName, r: CreateRun) => {
    const one = r.concurrency === 1;
    createRows.push([
      `${name}  c=${r.concurrency}`,
      one ? '' : int0(r.createsPerSecond),
      fmt(r.latency.p50),
      fmt(r.latency.p90),
      fmt(r.latency.p99),
      one ? '' : int0(r.completionsPerSecond),
      one ? '' : int0(r.backlogAtEnd),
      one ? '' : int0(r.drainMs),
      int0(r.endToEndPerSecond),
      one ? '' : fmt(r.cpuMsPerPrediction),
      one || name !== 'distributed' ? '' : fmt(r.sidecarCpuMsPerPrediction),
    ]);
    createJson[name] ??= {};
    (createJson[name] as Record<string, unknown>)[`c${r.concurrency}`] = {
      concurrency: r.concurrency,
      how: one
        ? 'one at a time: each prediction finished before the next create'
        : 'closed loop over a fixed window, the worker running beside it',
      latency: roundSummary(r.latency),
      ...(one
        ? { predictionsPerSecondOneAtATime: round3(r.endToEndPerSecond) }
        : {
            createsPerSecond: Math.round(r.createsPerSecond),
            completionsPerSecondInWindow: Math.round(r.completionsPerSecond),
            backlogAtEnd: r.backlogAtEnd,
            drainMs: Math.round(r.drainMs),
            endToEndPerSecond: Math.round(r.endToEndPerSecond),
            cpuMsPerPrediction: round3(r.cpuMsPerPrediction),
            ...(name === 'distributed'
              ? { redisServerCpuMsPerPrediction: round3(r.sidecarCpuMsPerPrediction) }
              : {}),
          }),
      creates: r.creates,
      errors: r.errors,
    };
    if (r.errors > 0)
      errors.push(`create ${name} c=${r.concurrency}: ${r.errors} errors (${r.errorSamples.join('; ')})`);
  };
  for (const m of modes) {
    const r = c1.get(m.name);
    if (r) addCreateRow(m.name, r);
  }
  for (const c of settings.concurrency) {
    for (const m of modes) {
      const r = throughput.get(`${m.name} ${c}`);
      if (r) addCreateRow(m.name, r);
    }
  }
  out.push(
    table(
      `Prediction create: POST /v1/predictions (${MODEL} ${settings.size}x${settings.size}, no await, no ` +
        `webhook; ms). c=1: ${settings.createRequests} creates one at a time, each prediction finished ` +
        `before the next create (the worker keeps up by construction). c>1: closed loop, ${settings.throughputMs} ` +
        'ms window, worker in the same process: done/s = predictions finished per second in the window, ' +
        'backlog = created but unfinished at its end, drain = time to finish them, end-to-end/s = ' +
        'predictions / (run + drain), CPU ms/pred = Gantry CPU per prediction (create, run, store) incl. drain',
      [
        'mode  concurrency',
        'creates/s',
        'p50',
        'p90',
        'p99',
        'done/s',
        'backlog',
        'drain ms',
        'end-to-end/s',
        'CPU ms/pred',
        'redis CPU ms/pred',
      ],
      createRows,
    ),
  );
  json.create = createJson;
  const embeddedC1 = c1.get('embedded');
  if (embeddedC1) {
    verdicts.push({
      target: 'predictions-embedded',
      metric: 'create p50, c=1 (ms)',
      value: embeddedC1.latency.p50,
      limit: `< ${PREDICTION_TARGETS.createP50Ms} ms`,
      pass: embeddedC1.latency.p50 < PREDICTION_TARGETS.createP50Ms,
    });
  }

  // Completion → notice.
  const noticeRows: string[][] = [];
  const breakdownRows: string[][] = [];
  const noticeJson: Record<string, unknown> = {};
  for (const [key, run] of notices) {
    const [name, cText] = key.split(' ') as [ModeName, string];
    const c = Number(cText);
    const label = `${name}  c=${c}`;
    const modeJson: Record<string, unknown> = {
      predictions: run.samples.length,
      concurrency: c,
      wallMs: Math.round(run.wallMs),
      webhooksReceived: run.received,
      errors: run.errors.length,
    };
    for (const e of run.errors.slice(0, 5)) errors.push(`notice ${label}: ${e}`);
    if (run.errors.length > 5) errors.push(`notice ${label}: ${run.errors.length - 5} more errors`);
    for (const kind of KINDS) {
      const all = run.samples.filter((s) => s.kind === kind);
      const live = all.filter((s) => s.live);
      const n = summarize(live.map((s) => s.noticeMs));
      const runS = summarize(live.map((s) => s.runMs));
      const createS = summarize(live.map((s) => s.createMs));
      noticeRows.push([
        `${label}  ${KIND_LABEL[kind]}`,
        kind === 'sse' ? `${live.length}/${all.length}` : String(live.length),
        fmt(n.p50),
        fmt(n.p90),
        fmt(n.p99),
        fmt(n.max),
        fmt(runS.p50, 0),
        fmt(createS.p50),
      ]);
      const entry: Record<string, unknown> = {
        samples: live.length,
        ...(kind === 'sse' ? { openedAfterCompletion: all.length - live.length } : {}),
        completionToNotice: roundSummary(n),
        createdToCompleted: roundSummary(runS),
        createLatency: roundSummary(createS),
      };
      if (kind !== 'sse') {
        const b = run.breakdown.get(kind) ?? [];
        const scheduled = summarize(b.map((x) => x.scheduledMs));
        const queued = summarize(b.map((x) => x.queuedMs));
        const attempt = summarize(b.map((x) => x.attemptMs));
        const orderWaits = b.filter((x) => x.queuedMs >= ORDER_WAIT_MS - 5).length;
        const retried = b.filter((x) => x.attempts > 1).length;
        breakdownRows.push([
          `${label}  ${KIND_LABEL[kind]}`,
          String(b.length),
          `${fmt(scheduled.p50, 0)} / ${fmt(scheduled.p90, 0)}`,
          `${fmt(queued.p50, 0)} / ${fmt(queued.p90, 0)} / ${fmt(queued.max, 0)}`,
          `${fmt(attempt.p50, 0)} / ${fmt(attempt.p90, 0)}`,
          String(orderWaits),
          String(retried),
        ]);
        entry.deliveryLog = {
          samples: b.length,
          completedToRecord: roundSummary(scheduled),
          recordToAttempt: roundSummary(queued),
          attempt: roundSummary(attempt),
          recordToAttemptOver45Ms: orderWaits,
          retried,
        };
        verdicts.push({
          target: `predictions-${name}`,
          metric: `webhook completed→delivered p50, c=${c}, ${kind === 'webhook-all' ? 'all events' : 'events [completed]'} (ms)`,
          value: n.p50,
          limit: `< ${PREDICTION_TARGETS.webhookP50Ms} ms`,
          pass: n.p50 < PREDICTION_TARGETS.webhookP50Ms,
        });
      }
      modeJson[kind] = entry;
    }
    const byMode = (noticeJson[name] ?? {}) as Record<string, unknown>;
    byMode[`c${c}`] = modeJson;
    noticeJson[name] = byMode;
  }
  out.push(
    table(
      `Completion → notice: arrival at the bench − completed_at (ms; ${settings.samples} predictions per kind, ` +
        'mode and concurrency, kinds in turn; c = predictions in flight, c=1: one at a time; completed_at is ' +
        'ms-truncated: +0.5 ms bias on average). run = completed_at − created_at; SSE n = streams that saw ' +
        'the completion live / all',
      ['mode  concurrency  kind', 'n', 'p50', 'p90', 'p99', 'max', 'run p50', 'create p50'],
      noticeRows,
    ),
  );
  if (breakdownRows.length > 0)
    out.push(
      table(
        "Webhook time from each prediction.succeeded delivery's own log (ms, Gantry's clock, ms precision): " +
          'completed → delivery record written; record → attempt start (queue pick-up, wait for earlier ' +
          `events of the prediction: ${ORDER_WAIT_MS} ms re-queues, reads, signing); the attempt (POST, ` +
          'answer read back in Gantry)',
        [
          'mode  concurrency  kind',
          'n',
          'completed→record p50/p90',
          'record→attempt p50/p90/max',
          'attempt p50/p90',
          `record→attempt >= ${ORDER_WAIT_MS - 5}`,
          'retried',
        ],
        breakdownRows,
      ),
    );
  json.notice = noticeJson;

  if (redisCount) {
    const top = redisCount.byKind.slice(0, 14);
    const rest = redisCount.byKind.slice(14).reduce((a, b) => a + b.perPrediction, 0);
    const rows = top.map((k) => [k.command, k.key, fmt(k.perPrediction)]);
    if (rest > 0) rows.push(['', `(${redisCount.byKind.length - 14} more kinds)`, fmt(rest)]);
    rows.push(['', 'round trips per prediction', fmt(redisCount.roundTrips)]);
    rows.push([
      '',
      'commands inside scripts per prediction (not round trips)',
      fmt(redisCount.insideScripts),
    ]);
    out.push(
      table(
        `Redis commands per prediction, distributed (${redisCount.predictions} predictions: create, run, done, ` +
          'no webhook; under MONITOR, apart from the timed runs; ids in keys shown as {id}, {n})',
        ['command', 'key or script', 'per prediction'],
        rows,
        2,
      ),
    );
    json.redisCommands = {
      predictions: redisCount.predictions,
      roundTripsPerPrediction: round3(redisCount.roundTrips),
      insideScriptsPerPrediction: round3(redisCount.insideScripts),
      byKind: redisCount.byKind,
      connections: redisCount.raw.connections,
      windowMs: Math.round(redisCount.raw.windowMs),
    };
  }
  json.memory = Object.fromEntries(modes.map((m) => [m.name, m.memory ?? null]));

  out.push(
    table(
      `Predictions targets (load average at start ${loadavgAtStart.join(' ')}, at end ${loadavgAtEnd.join(' ')})`,
      ['target', 'metric', 'result', 'limit', 'verdict'],
      verdicts.map((v) => [v.target, v.metric, fmt(v.value, 3), v.limit, v.pass ? 'PASS' : 'MISS']),
    ),
  );
  if (distributedSkipped) out.push(`\n!!! ${distributedSkipped}`);
  if (errors.length > 0) out.push(`\nWARNING (predictions): ${errors.join('\n  ')}`);
  process.stdout.write(`${out.join('\n')}\n`);
  if (profile) {
    process.stdout.write(`\n${formatProfile({ ...profile, file: relative(options.root, profile.file) })}\n`);
    json.profile = { ...profile, file: relative(options.root, profile.file), mode: settings.profileMode };
  } else if (profiling) process.stdout.write('\n(no CPU profile was written by the profiled Gantry)\n');
  json.durationS = Math.round((performance.now() - phaseStarted) / 100) / 10;
  json.errors = errors;
  log(`predictions phase done (${json.durationS} s)`);
  // display: run.ts prints ms values signed (as added latencies); these are plain durations.
  return {
    json,
    verdicts: verdicts.map((v) => ({ ...v, value: round3(v.value), display: fmt(v.value, 3) })),
    errors,
  };
}
