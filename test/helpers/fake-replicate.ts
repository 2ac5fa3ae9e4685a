/**
 * A fake Replicate HTTP API: a real node:http server on 127.0.0.1 speaking Replicate's wire format, as
 * recorded from api.replicate.com (replicate-python's cassettes) and documented in its HTTP reference:
 *
 * - POST /v1/models/{owner}/{name}/predictions `{input}` (official models) and POST /v1/predictions
 *   `{version, input}` where version is `id`, `owner/name:id` or `owner/name`; 201 with the prediction.
 * - `Prefer: wait[=n]` holds the create answer until the prediction is terminal or n seconds (default
 *   60) passed, and answers `Preference-Applied`; `Cancel-After` (`30`, `30s`, `5m`, `1h30m45s`) ends the
 *   prediction at its deadline: `aborted` before it started, `canceled` after.
 * - GET /v1/predictions/{id}, POST /v1/predictions/{id}/cancel (200 with the prediction either way).
 * - Errors are problem+json: 401 `{"title":"Unauthenticated","detail":"You did not pass a valid
 *   authentication token","status":401}`, 404 `{"detail":"The requested resource could not be
 *   found.","status":404}`, 422 `Invalid version or not permitted`, 429 `Request was throttled...`.
 *
 * Every call needs `Authorization: Bearer <token>` with a token from the configured set; a prediction is
 * only visible (GET, cancel, files) with the token that created it, as an account's predictions are.
 * A prediction's life is a function of the clock: `starting` for startingMs, `processing` for
 * processingMs (cumulative logs and, for language models, a growing token array), then `succeeded` or
 * `failed`. Output files are served by the fake itself under /delivery/ and need the creator's token.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type {
  FakeServerControls,
  JsonObject,
  RecordedExchange,
  Exchange as ServerExchange,
} from './fake-server.js';
import { isObject, sendJson, sleep, startRecordingServer } from './fake-server.js';

export type { JsonObject } from './fake-server.js';

/** The token the fake accepts unless told otherwise. */
export const FAKE_REPLICATE_TOKEN = 'r8_fake_caller_token_0123456789';
/** An official model (run by name) and a community model pinned by version, known to the fake by default. */
export const FAKE_OFFICIAL_MODEL = 'fake-labs/flux-fast';
export const FAKE_VERSIONED_MODEL = 'fake-user/sdxl-lora';
export const FAKE_VERSION_ID = 'a00d0b7dcbb9c3fbb34ba87d2d5b46c56969c84a628bf778a7fdaec30b1b99c5';
/** A 1x1 PNG: the bytes of every output file. */
export const FAKE_PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==',
  'base64',
);

/** tqdm-style logs, as Cog models print them. */
export const DEFAULT_LOGS = [
  'Using seed: 42\n',
  '  0%|          | 0/4 [00:00<?, ?it/s]\n',
  ' 50%|█████     | 2/4 [00:00<00:00,  7.9it/s]\n',
  '100%|██████████| 4/4 [00:00<00:00,  7.9it/s]\n',
];

export type FakeOutput =
  /** `count` file URLs served by the fake; a single string when `single`, an array otherwise. */
  | { kind: 'files'; count?: number; single?: boolean }
  /** A language model: an array of string tokens that grows while the prediction processes. */
  | { kind: 'tokens'; tokens: string[] }
  /** Exactly this `output` value once succeeded. */
  | { kind: 'raw'; value: unknown };

/** How the fake answers one request. `{}` is a normal answer; the job fields shape a created prediction. */
export interface FakeReplicateBehavior {
  /** Answer with this status and a problem+json body (title/detail default per status). */
  error?: { status: number; title?: string; detail?: string };
  /** Retry-After header on error answers. */
  retryAfter?: string;
  /** Destroy the socket without answering (a network failure). */
  cut?: boolean;
  /** Wait this long before answering. */
  delayMs?: number;
  /** Create only: how long the prediction stays `starting` (default 10 ms). */
  startingMs?: number;
  /** Create only: how long it stays `processing` (default 60 ms). */
  processingMs?: number;
  /** Create only: log chunks, revealed one by one over the processing time (default DEFAULT_LOGS). */
  logs?: string[];
  /** Create only: what the model returns (default one file URL in an array). */
  output?: FakeOutput;
  /** Create only: the prediction ends `failed` with this error instead of succeeding. */
  fail?: string;
  /** Create only: metrics.predict_time (default the processing time in seconds). */
  predictTime?: number;
  /** Create only: hold the create answer at most this long, whatever `Prefer: wait` asks. */
  maxHoldMs?: number;
}

export type RecordedReplicateRequest = RecordedExchange<FakeReplicateBehavior>;

export interface FakeReplicateOptions {
  /** Bearer tokens the fake accepts (default [FAKE_REPLICATE_TOKEN]). */
  tokens?: string[];
  /** Official models runnable by name (default [FAKE_OFFICIAL_MODEL]). */
  models?: string[];
  /** Version ids and the model each belongs to (default FAKE_VERSION_ID of FAKE_VERSIONED_MODEL). */
  versions?: Record<string, string>;
  behavior?: FakeReplicateBehavior;
}

/** The fake's view of one prediction, for assertions. */
export interface FakePrediction {
  id: string;
  model: string;
  version: string;
  input: unknown;
  /** The Bearer token that created it. */
  token: string;
  createdAt: number;
  /** Set when POST /cancel (or Cancel-After) stopped it while running. */
  canceledAt?: number;
  canceledBy?: 'cancel' | 'deadline';
  cancelRequests: number;
  job: Required<Pick<FakeReplicateBehavior, 'startingMs' | 'processingMs' | 'logs' | 'output'>> &
    Pick<FakeReplicateBehavior, 'fail' | 'predictTime'>;
  deadlineAt?: number;
}

export interface FakeReplicate extends FakeServerControls<FakeReplicateBehavior> {
  /** The backend's base_url: `http://127.0.0.1:PORT/v1`. */
  url: string;
  origin: string;
  port: number;
  /** Every prediction created, in order. */
  predictions: FakePrediction[];
  prediction(id: string): FakePrediction | undefined;
  /** The prediction object the API would answer now. */
  snapshot(id: string): JsonObject | undefined;
}

const NOT_FOUND = { detail: 'The requested resource could not be found.', status: 404 };
const PROBLEM_DEFAULTS: Record<number, { title: string; detail: string }> = {
  401: { title: 'Unauthenticated', detail: 'You did not pass a valid authentication token' },
  402: { title: 'Insufficient credit', detail: 'You have insufficient credit to run this model.' },
  403: { title: 'Forbidden', detail: 'You do not have permission to perform this action.' },
  422: {
    title: 'Invalid version or not permitted',
    detail: "The specified version does not exist (or perhaps you don't have permission to use it?)",
  },
  429: { title: 'Request was throttled', detail: 'Request was throttled. Expected available in 1 second.' },
  500: { title: 'Internal Server Error', detail: 'Something went wrong on our end.' },
  503: { title: 'Service Unavailable', detail: 'The service is temporarily unavailable.' },
};

export async function startFakeReplicate(options: FakeReplicateOptions = {}): Promise<FakeReplicate> {
  const tokens = new Set(options.tokens ?? [FAKE_REPLICATE_TOKEN]);
  const models = new Set(options.models ?? [FAKE_OFFICIAL_MODEL]);
  const versions = new Map(Object.entries(options.versions ?? { [FAKE_VERSION_ID]: FAKE_VERSIONED_MODEL }));
  const predictions: FakePrediction[] = [];
  const byId = new Map<string, FakePrediction>();
  let origin = '';

  async function handle(ex: ServerExchange<FakeReplicateBehavior>): Promise<void> {
    const { req, res, behavior } = ex;
    if (behavior.delayMs) {
      await sleep(behavior.delayMs, ex.gone);
      if (ex.gone.aborted) return;
    }
    if (behavior.cut) return ex.cut();
    const path = new URL(req.url ?? '/', 'http://fake').pathname;
    const method = req.method ?? 'GET';
    const token = bearerOf(req.headers);

    const file = /^\/delivery\/([^/]+)\/([^/]+)$/.exec(path);
    if (method === 'GET' && file) {
      const prediction = byId.get(file[1]!);
      if (token === undefined || !tokens.has(token)) return problem(res, 401);
      if (!prediction || prediction.token !== token) return sendJson(res, 404, NOT_FOUND);
      res.writeHead(200, { 'content-type': 'image/png', 'content-length': String(FAKE_PNG.length) });
      res.end(FAKE_PNG);
      return;
    }
    if (!path.startsWith('/v1/')) return sendJson(res, 404, NOT_FOUND);
    if (token === undefined || !tokens.has(token)) return problem(res, 401);
    if (behavior.error) return problem(res, behavior.error.status, behavior.error, behavior.retryAfter);

    const official = /^\/v1\/models\/([^/]+)\/([^/]+)\/predictions$/.exec(path);
    if (method === 'POST' && official) {
      const model = `${official[1]}/${official[2]}`;
      if (!models.has(model)) return sendJson(res, 404, NOT_FOUND);
      return create(ex, token, model, `dp-${randomHex(32)}`);
    }
    if (method === 'POST' && path === '/v1/predictions') {
      const target = resolveVersion(ex.body?.version);
      if (!target) return problem(res, 422);
      return create(ex, token, target.model, target.version);
    }
    const one = /^\/v1\/predictions\/([^/]+)(\/cancel)?$/.exec(path);
    if (one) {
      const prediction = byId.get(one[1]!);
      // Another account's prediction does not exist, as far as this token can tell.
      if (!prediction || prediction.token !== token) return sendJson(res, 404, NOT_FOUND);
      if (method === 'GET' && !one[2]) return sendJson(res, 200, render(prediction));
      if (method === 'POST' && one[2]) {
        prediction.cancelRequests++;
        if (!isTerminal(statusAt(prediction, Date.now()))) {
          prediction.canceledAt = Date.now();
          prediction.canceledBy = 'cancel';
        }
        return sendJson(res, 200, render(prediction));
      }
    }
    return sendJson(res, 404, NOT_FOUND);
  }

  function resolveVersion(version: unknown): { model: string; version: string } | undefined {
    if (typeof version !== 'string') return undefined;
    const pinned = /^([^/:]+\/[^/:]+):([0-9a-f]+)$/.exec(version);
    if (pinned) {
      return versions.get(pinned[2]!) === pinned[1] ? { model: pinned[1]!, version: pinned[2]! } : undefined;
    }
    const model = versions.get(version);
    if (model) return { model, version };
    // Since 2025 POST /v1/predictions also runs official models named owner/name.
    if (models.has(version)) return { model: version, version: `dp-${randomHex(32)}` };
    return undefined;
  }

  async function create(
    ex: ServerExchange<FakeReplicateBehavior>,
    token: string,
    model: string,
    version: string,
  ): Promise<void> {
    const { req, res, behavior, body } = ex;
    if (!body || !isObject(body.input)) {
      return problem(res, 422, {
        title: 'Input validation failed',
        detail: '- input: Invalid type. Expected: object, given: null',
      });
    }
    const now = Date.now();
    const prediction: FakePrediction = {
      id: predictionId(),
      model,
      version,
      input: body.input,
      token,
      createdAt: now,
      cancelRequests: 0,
      job: {
        startingMs: behavior.startingMs ?? 10,
        processingMs: behavior.processingMs ?? 60,
        logs: behavior.logs ?? DEFAULT_LOGS,
        output: behavior.output ?? { kind: 'files', count: 1 },
        ...(behavior.fail === undefined ? {} : { fail: behavior.fail }),
        ...(behavior.predictTime === undefined ? {} : { predictTime: behavior.predictTime }),
      },
    };
    const cancelAfter = parseDuration(header(req.headers, 'cancel-after'));
    if (cancelAfter !== undefined) prediction.deadlineAt = now + cancelAfter;
    predictions.push(prediction);
    byId.set(prediction.id, prediction);

    const headers: Record<string, string> = {
      location: `${origin}/v1/predictions/${prediction.id}`,
    };
    const wait = parsePreferWait(header(req.headers, 'prefer'));
    if (wait !== undefined) {
      headers['preference-applied'] = `wait=${wait}`;
      const holdUntil = now + Math.min(wait * 1000, behavior.maxHoldMs ?? Number.POSITIVE_INFINITY);
      while (!isTerminal(statusAt(prediction, Date.now())) && Date.now() < holdUntil && !ex.gone.aborted) {
        await sleep(Math.min(10, holdUntil - Date.now()), ex.gone);
      }
      if (ex.gone.aborted) return;
    }
    sendJson(res, 201, render(prediction), headers, 'application/json; charset=UTF-8');
  }

  /** The prediction object as the API answers it now, in Replicate's field order. */
  function render(prediction: FakePrediction): JsonObject {
    const now = Date.now();
    const { job } = prediction;
    const status = statusAt(prediction, now);
    const startedAt = prediction.createdAt + job.startingMs;
    const endedAt = endTime(prediction);
    const done = isTerminal(status);
    const ran = done ? Math.max(0, Math.min(endedAt, now) - startedAt) : Math.max(0, now - startedAt);
    const fraction =
      status === 'starting' || status === 'aborted' ? 0 : Math.min(1, ran / Math.max(1, job.processingMs));
    const shownLogs =
      status === 'succeeded' || status === 'failed' ? job.logs.length : visible(job.logs, fraction);
    const logs = job.logs.slice(0, shownLogs).join('');

    const urls: JsonObject = {
      cancel: `${origin}/v1/predictions/${prediction.id}/cancel`,
      get: `${origin}/v1/predictions/${prediction.id}`,
    };
    if (job.output.kind === 'tokens') urls.stream = `${origin}/v1/streams/${prediction.id}`;

    const object: JsonObject = {
      id: prediction.id,
      model: prediction.model,
      version: prediction.version,
      input: prediction.input,
      logs: status === 'starting' || status === 'aborted' ? '' : logs,
      output: outputAt(prediction, status, fraction),
      data_removed: false,
      error: status === 'failed' ? (job.fail ?? null) : null,
      status,
      created_at: new Date(prediction.createdAt).toISOString(),
    };
    if (status !== 'starting' && status !== 'aborted') object.started_at = new Date(startedAt).toISOString();
    if (done) object.completed_at = new Date(Math.min(endedAt, now)).toISOString();
    object.urls = urls;
    if (done && status !== 'aborted') {
      const predictTime = job.predictTime ?? ran / 1000;
      object.metrics = {
        predict_time: predictTime,
        total_time: (Math.min(endedAt, now) - prediction.createdAt) / 1000,
      };
    }
    return object;
  }

  function outputAt(prediction: FakePrediction, status: string, fraction: number): unknown {
    const { output } = prediction.job;
    if (output.kind === 'tokens') {
      if (status === 'starting' || status === 'aborted') return null;
      const shown = status === 'succeeded' ? output.tokens.length : visible(output.tokens, fraction);
      return shown === 0 && status !== 'succeeded' ? null : output.tokens.slice(0, shown);
    }
    if (status !== 'succeeded') return null;
    if (output.kind === 'raw') return output.value;
    const count = output.count ?? 1;
    const files = Array.from({ length: count }, (_, i) => `${origin}/delivery/${prediction.id}/out-${i}.png`);
    return output.single ? files[0] : files;
  }

  const server = await startRecordingServer<FakeReplicateBehavior>(handle, {
    name: 'fake replicate',
    behavior: options.behavior ?? {},
    errorBody: (message) => ({ title: 'Internal Server Error', detail: message, status: 500 }),
  });
  origin = server.origin;

  const reset = server.reset.bind(server);
  return {
    ...server,
    url: `${server.origin}/v1`,
    predictions,
    prediction: (id) => byId.get(id),
    snapshot: (id) => {
      const prediction = byId.get(id);
      return prediction ? render(prediction) : undefined;
    },
    reset() {
      reset();
      predictions.length = 0;
      byId.clear();
    },
  };
}

/** The status of `prediction` at time `now`: a pure function of the clock, cancel and deadline. */
function statusAt(prediction: FakePrediction, now: number): string {
  const { job } = prediction;
  const startedAt = prediction.createdAt + job.startingMs;
  const finishedAt = startedAt + job.processingMs;
  const stop = stopTime(prediction);
  if (stop !== undefined && stop <= now && stop < finishedAt) {
    return stop < startedAt ? 'aborted' : 'canceled';
  }
  if (now < startedAt) return 'starting';
  if (now < finishedAt) return 'processing';
  return job.fail === undefined ? 'succeeded' : 'failed';
}

function stopTime(prediction: FakePrediction): number | undefined {
  const times = [prediction.canceledAt, prediction.deadlineAt].filter((t): t is number => t !== undefined);
  return times.length === 0 ? undefined : Math.min(...times);
}

function endTime(prediction: FakePrediction): number {
  const finishedAt = prediction.createdAt + prediction.job.startingMs + prediction.job.processingMs;
  const stop = stopTime(prediction);
  return stop !== undefined && stop < finishedAt ? stop : finishedAt;
}

function isTerminal(status: string): boolean {
  return status === 'succeeded' || status === 'failed' || status === 'canceled' || status === 'aborted';
}

/** How many of `items` a prediction `fraction` of the way through has revealed (at least one once started). */
function visible(items: readonly unknown[], fraction: number): number {
  if (items.length === 0) return 0;
  return Math.min(items.length, Math.max(1, Math.floor(fraction * items.length) + 1));
}

function problem(
  res: ServerExchange<FakeReplicateBehavior>['res'],
  status: number,
  override: { title?: string; detail?: string } = {},
  retryAfter?: string,
): void {
  const defaults = PROBLEM_DEFAULTS[status] ?? { title: 'Error', detail: `HTTP ${status}` };
  const body = {
    title: override.title ?? defaults.title,
    detail: override.detail ?? defaults.detail,
    status,
  };
  sendJson(res, status, body, retryAfter ? { 'retry-after': retryAfter } : {}, 'application/problem+json');
}

function bearerOf(headers: IncomingHttpHeaders): string | undefined {
  const match = /^Bearer\s+(\S+)$/i.exec(headers.authorization ?? '');
  return match?.[1];
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** `wait` (60 s) or `wait=n`, n between 1 and 60; undefined when the client asked for async mode. */
export function parsePreferWait(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const match = /(?:^|[,;\s])wait(?:=(\d+))?(?:$|[,;\s])/.exec(value);
  if (!match) return undefined;
  return match[1] === undefined ? 60 : Math.min(60, Math.max(1, Number(match[1])));
}

/** Cancel-After: `30`, `30s`, `5m`, `1h30m45s`, in milliseconds; undefined when absent or malformed. */
export function parseDuration(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  if (!/^(?:\d+h)?(?:\d+m)?(?:\d+s)?$/.test(text) || text === '') return undefined;
  let ms = 0;
  for (const [, amount, unit] of text.matchAll(/(\d+)([hms])/g)) {
    ms += Number(amount) * (unit === 'h' ? 3_600_000 : unit === 'm' ? 60_000 : 1000);
  }
  return ms;
}

const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** 26 lowercase base32-ish characters, like `kr2d2jhqbsrj60cjb2vtmekgh4`. */
function predictionId(): string {
  let id = '';
  for (let i = 0; i < 26; i++) id += ID_ALPHABET[Math.floor(Math.random() * ID_ALPHABET.length)];
  return id;
}

function randomHex(length: number): string {
  let hex = '';
  for (let i = 0; i < length; i++) hex += Math.floor(Math.random() * 16).toString(16);
  return hex;
}
