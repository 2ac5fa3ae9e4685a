/**
 * A fake Cog server (a model container built with replicate/cog): a real node:http server on 127.0.0.1
 * that speaks Cog's HTTP API as python/cog/server/http.py does, and records every request.
 *
 * - `GET /health-check`, `GET /openapi.json` (an image model: prompt, aspect_ratio and output_format
 *   enums behind `allOf: [{$ref}]`, num_outputs, seed; Output a list of URIs unless `outputSchema`
 *   says otherwise; `openApiAnswers` first, if given), `GET /`.
 * - `PUT /predictions/{id}` and `POST /predictions`: synchronous, or with `Prefer: respond-async` a 202
 *   and webhooks to `webhook` for the events in `webhook_events_filter`. A PUT with the id of a running
 *   prediction answers 202 with its state; any other create while every slot is busy gets 409.
 * - Webhooks carry the whole prediction (cumulative `logs`, a growing `output` list for iterators);
 *   output/logs ones are throttled like Cog's (`throttleMs`), start and completed always go, and a
 *   terminal one is retried on 429/5xx. The start webhook is sent before the 202, as Cog does.
 * - `POST /predictions/{id}/cancel` stops the running job (`canceled` lists it): its only terminal
 *   webhook says `canceled`. A synchronous client that leaves does not stop its job (Python Cog).
 * - The 202 answer and the start webhook say `starting` (Cog's docs/http.md); the model then runs in
 *   `processing`.
 * - Outputs are any JSON the model returns (numbers, objects, nested lists); files in them are data: URIs
 *   of a real PNG or JPEG, or with `uploadFiles` (Cog's --upload-url, async only) URLs the fake serves
 *   itself under `/uploads/`.
 */
import { randomBytes } from 'node:crypto';
import sharp from 'sharp';
import {
  type Exchange,
  type FakeServerControls,
  isObject,
  type JsonObject,
  type RecordedExchange,
  sendJson,
  sleep,
  startRecordingServer,
} from './fake-server.js';

export type { JsonObject } from './fake-server.js';

/** Cog's ConcatenateIterator output schema, as its /openapi.json publishes it (a language model's tokens). */
export const CONCATENATED_OUTPUT = {
  title: 'Output',
  type: 'array',
  items: { type: 'string' },
  'x-cog-array-type': 'iterator',
  'x-cog-array-display': 'concatenate',
};

/**
 * One value predict() returns or yields: any JSON, where `{file: name}` is a file the fake holds
 * (`output.png`, `output.jpg`), encoded like a cog.Path wherever it sits.
 */
export type FakeCogOutput =
  | string
  | number
  | boolean
  | null
  | { file: string }
  | FakeCogOutput[]
  | { [key: string]: FakeCogOutput };

/** How the model behaves for one prediction. `{}` prints a tqdm bar and returns `num_outputs` PNGs. */
export interface CogBehavior {
  /** Lines the model prints, one per step (default: a seed line and a tqdm bar). */
  logs?: string[];
  /** Time each step takes: each log line, each yielded output, and the final return. Default 10 ms. */
  stepMs?: number;
  /** What predict() returns; a list is returned whole (one webhook at the end) unless `iterator`. */
  output?: FakeCogOutput | FakeCogOutput[];
  /** predict() yields: the output list grows one item per step, each with an `output` webhook. */
  iterator?: boolean;
  /** predict() raises this after its logs: status failed, `error` is this text, the traceback logged. */
  fail?: string;
  /** Answer create requests with this HTTP status (and FastAPI's error body) instead of running. */
  status?: number;
  /** Webhooks are lost on the way: none is sent. */
  dropWebhooks?: boolean;
}

export interface FakeCogOptions {
  /** Like `cog serve --upload-url`: async file outputs become URLs this fake serves. */
  uploadFiles?: boolean;
  /** Prediction slots (cog.yaml `concurrency.max`); Cog's default is 1. */
  concurrency?: number;
  /** Least time between output/logs webhooks (COG_THROTTLE_RESPONSE_INTERVAL); Cog's default is 500 ms. */
  throttleMs?: number;
  /** Not Cog: also serve GET /predictions/{id} and list it in /openapi.json (a server that can be polled). */
  pollable?: boolean;
  /** `components.schemas.Output` of /openapi.json (default: a list of URIs, an image model's). */
  outputSchema?: JsonObject;
  /**
   * Answers to the first GET /openapi.json requests, one each, before the document is served (a server
   * still starting behind a proxy: an error status, an HTML page).
   */
  openApiAnswers?: Array<{ status: number; body: string; contentType?: string }>;
  behavior?: CogBehavior;
}

export type CogWebhookEvent = 'start' | 'output' | 'logs' | 'completed';

export interface SentWebhook {
  predictionId: string;
  event: CogWebhookEvent;
  url: string;
  body: JsonObject;
  /** The receiver's HTTP status of the last attempt; null when it could not be reached. */
  responseStatus: number | null;
}

export interface FakeCog extends FakeServerControls<CogBehavior> {
  /** `http://127.0.0.1:PORT` */
  origin: string;
  port: number;
  /** The PNG every `{file: 'output.png'}` output holds (8x8, red). */
  png: Buffer;
  /** The JPEG every `{file: 'output.jpg'}` output holds (8x8, blue). */
  jpeg: Buffer;
  /** `png` as Cog encodes a file output without an upload URL. */
  pngDataUri: string;
  /** Where the fake serves a file uploaded for a prediction (`uploadFiles`). */
  uploadUrl(predictionId: string, name: string): string;
  /** Ids of the predictions a cancel request stopped while they ran. */
  canceled: string[];
  /** Every webhook sent, in order. */
  webhooks: SentWebhook[];
  /** Ids of the predictions running now. */
  running(): string[];
  /** Resolves once no prediction runs (and every webhook has been sent). */
  idle(timeoutMs?: number): Promise<void>;
}

export type RecordedCogRequest = RecordedExchange<CogBehavior>;

const COG_VERSION = '0.13.7';
const WEBHOOK_USER_AGENT = `cog-worker/${COG_VERSION} python-requests/2.32.3`;
const ASPECT_RATIOS = ['1:1', '16:9', '9:16', '4:3', '3:4'];
const OUTPUT_FORMATS = ['webp', 'jpg', 'png'];
const DEFAULT_LOGS = [
  'Using seed: 42',
  '  0%|          | 0/4 [00:00<?, ?it/s]',
  ' 50%|█████     | 2/4 [00:00<00:00, 19.94it/s]',
  '100%|██████████| 4/4 [00:00<00:00, 19.97it/s]',
];
const TERMINAL_ATTEMPTS = 3;

interface Job {
  id: string;
  state: JsonObject;
  startedAt: number;
  stop: AbortController;
  /** Set by reset()/close(): the job ends without sending anything more. */
  silenced: boolean;
  webhook: { url: string; events: Set<string> } | undefined;
  lastSentAt: number;
  async: boolean;
  done: Promise<void>;
}

export async function startFakeCog(options: FakeCogOptions = {}): Promise<FakeCog> {
  const png = await sharp({
    create: { width: 8, height: 8, channels: 3, background: { r: 255, g: 0, b: 0 } },
  })
    .png()
    .toBuffer();
  const jpeg = await sharp({
    create: { width: 8, height: 8, channels: 3, background: { r: 0, g: 0, b: 255 } },
  })
    .jpeg()
    .toBuffer();
  const files = new Map<string, { data: Buffer; contentType: string }>([
    ['output.png', { data: png, contentType: 'image/png' }],
    ['output.jpg', { data: jpeg, contentType: 'image/jpeg' }],
  ]);
  const uploads = new Map<string, { data: Buffer; contentType: string }>();
  const concurrency = options.concurrency ?? 1;
  const throttleMs = options.throttleMs ?? 500;
  const jobs = new Map<string, Job>();
  /** Finished predictions, for GET /predictions/{id} on a pollable fake. */
  const finished = new Map<string, JsonObject>();
  const canceled: string[] = [];
  const webhooks: SentWebhook[] = [];
  const setupStartedAt = pyTime(new Date());
  const openApiAnswers = [...(options.openApiAnswers ?? [])];
  let origin = '';

  async function handle(ex: Exchange<CogBehavior>): Promise<void> {
    const url = new URL(ex.req.url ?? '/', 'http://fake');
    const method = ex.req.method ?? 'GET';
    const parts = url.pathname.split('/').filter((p) => p !== '');
    const route = (expected: string, allowed: string): boolean => {
      if (url.pathname !== expected) return false;
      if (method !== allowed) sendJson(ex.res, 405, { detail: 'Method Not Allowed' });
      return true;
    };

    if (route('/', 'GET')) {
      // The discovery document of Cog's docs/http.md (`GET /`).
      if (method === 'GET') {
        sendJson(ex.res, 200, {
          cog_version: COG_VERSION,
          docs_url: '/docs',
          openapi_url: '/openapi.json',
          shutdown_url: '/shutdown',
          healthcheck_url: '/health-check',
          predictions_url: '/predictions',
          predictions_idempotent_url: '/predictions/{prediction_id}',
          predictions_cancel_url: '/predictions/{prediction_id}/cancel',
        });
      }
      return;
    }
    if (route('/health-check', 'GET')) {
      if (method === 'GET') sendJson(ex.res, 200, healthCheck());
      return;
    }
    if (route('/openapi.json', 'GET')) {
      const early = method === 'GET' ? openApiAnswers.shift() : undefined;
      if (early) {
        ex.res.writeHead(early.status, { 'content-type': early.contentType ?? 'text/html' });
        ex.res.end(early.body);
      } else if (method === 'GET')
        sendJson(ex.res, 200, openApiDocument(options.pollable === true, options.outputSchema));
      return;
    }
    if (parts[0] === 'uploads' && parts.length === 3 && method === 'GET') {
      const file = uploads.get(`${parts[1]}/${parts[2]}`);
      if (!file) return sendJson(ex.res, 404, { detail: 'Not Found' });
      ex.res.writeHead(200, { 'content-type': file.contentType, 'content-length': String(file.data.length) });
      ex.res.end(file.data);
      return;
    }
    if (url.pathname === '/predictions') {
      if (method !== 'POST') return sendJson(ex.res, 405, { detail: 'Method Not Allowed' });
      const id = typeof ex.body?.id === 'string' ? ex.body.id : newPredictionId();
      return create(ex, id, false);
    }
    if (parts[0] === 'predictions' && parts.length === 3 && parts[2] === 'cancel') {
      if (method !== 'POST') return sendJson(ex.res, 405, { detail: 'Method Not Allowed' });
      return cancel(ex, decodeURIComponent(parts[1] ?? ''));
    }
    if (parts[0] === 'predictions' && parts.length === 2) {
      const id = decodeURIComponent(parts[1] ?? '');
      if (method === 'PUT') return create(ex, id, true);
      if (method === 'GET' && options.pollable) {
        const state = jobs.get(id)?.state ?? finished.get(id);
        return state ? sendJson(ex.res, 200, state) : sendJson(ex.res, 404, { detail: 'Not Found' });
      }
      return sendJson(ex.res, 405, { detail: 'Method Not Allowed' });
    }
    sendJson(ex.res, 404, { detail: 'Not Found' });
  }

  function healthCheck(): JsonObject {
    return {
      status: jobs.size >= concurrency ? 'BUSY' : 'READY',
      setup: { started_at: setupStartedAt, completed_at: setupStartedAt, logs: '', status: 'succeeded' },
      version: { cog: COG_VERSION, python: '3.11.10' },
    };
  }

  async function create(ex: Exchange<CogBehavior>, id: string, idempotent: boolean): Promise<void> {
    const behavior = ex.behavior;
    if (behavior.status !== undefined) {
      return sendJson(ex.res, behavior.status, { detail: statusDetail(behavior.status) });
    }
    if (ex.rawBody.length > 0 && ex.body === undefined) {
      return sendJson(ex.res, 422, {
        detail: [{ loc: ['body', 0], msg: 'Expecting value', type: 'value_error.jsondecode' }],
      });
    }
    const body = ex.body ?? {};
    const input = isObject(body.input) ? body.input : {};
    const problems = validateRequest(body, input);
    if (problems.length > 0) return sendJson(ex.res, 422, { detail: problems });
    if (idempotent && typeof body.id === 'string' && body.id !== id) {
      return sendJson(ex.res, 422, {
        detail: [
          {
            loc: ['body', 'id'],
            msg: 'prediction ID must match the ID supplied in the URL',
            type: 'value_error',
          },
        ],
      });
    }
    const existing = jobs.get(id);
    if (idempotent && existing) return sendJson(ex.res, 202, existing.state);
    if (jobs.size >= concurrency) return sendJson(ex.res, 409, { detail: 'Already running a prediction' });

    const respondAsync = ex.req.headers.prefer === 'respond-async';
    const filter = Array.isArray(body.webhook_events_filter)
      ? body.webhook_events_filter.filter((e): e is string => typeof e === 'string')
      : ['start', 'output', 'logs', 'completed'];
    const job: Job = {
      id,
      state: {},
      startedAt: Date.now(),
      stop: new AbortController(),
      silenced: false,
      webhook:
        typeof body.webhook === 'string' && !behavior.dropWebhooks
          ? { url: body.webhook, events: new Set(filter) }
          : undefined,
      lastSentAt: 0,
      async: respondAsync,
      done: Promise.resolve(),
    };
    jobs.set(id, job);
    // Cog's event handler sends the start webhook (status `starting`) before the create request is
    // answered; the 202 says `starting` too. The model then runs in `processing`.
    job.state = { input, output: null, id, logs: '', status: 'starting', started_at: pyTime(new Date()) };
    await emit(job, 'start');
    const answer = structuredClone(job.state);
    job.state.status = 'processing';
    job.done = work(job, behavior, input).finally(() => {
      jobs.delete(id);
      finished.set(id, job.state);
    });
    if (respondAsync) return sendJson(ex.res, 202, answer);
    await job.done;
    if (ex.gone.aborted) return;
    // The synchronous answer is the whole response model, unset fields included.
    sendJson(ex.res, 200, {
      input,
      output: null,
      id,
      version: null,
      created_at: null,
      started_at: null,
      completed_at: null,
      logs: '',
      error: null,
      status: null,
      metrics: null,
      ...job.state,
    });
  }

  /** The model at work: logs, outputs, then the terminal status; a cancel ends it at the next step. */
  async function work(job: Job, behavior: CogBehavior, input: JsonObject): Promise<void> {
    const stepMs = behavior.stepMs ?? 10;
    const stopped = (): boolean => job.stop.signal.aborted;
    for (const line of behavior.logs ?? DEFAULT_LOGS) {
      await sleep(stepMs, job.stop.signal);
      if (stopped()) return finish(job, 'canceled');
      job.state.logs = `${String(job.state.logs)}${line}\n`;
      await emit(job, 'logs');
    }
    if (behavior.fail !== undefined) {
      await sleep(stepMs, job.stop.signal);
      if (stopped()) return finish(job, 'canceled');
      job.state.logs = `${String(job.state.logs)}${traceback(behavior.fail)}`;
      await emit(job, 'logs');
      job.state.error = behavior.fail;
      return finish(job, 'failed');
    }
    const numOutputs = typeof input.num_outputs === 'number' ? input.num_outputs : 1;
    const output =
      behavior.output ?? Array.from({ length: numOutputs }, (): FakeCogOutput => ({ file: 'output.png' }));
    const counter = { files: 0 };
    if (behavior.iterator && Array.isArray(output)) {
      job.state.output = [];
      for (const item of output) {
        await sleep(stepMs, job.stop.signal);
        if (stopped()) return finish(job, 'canceled');
        (job.state.output as unknown[]).push(encodeOutput(job, item, counter));
        await emit(job, 'output');
      }
    } else {
      await sleep(stepMs, job.stop.signal);
      if (stopped()) return finish(job, 'canceled');
      job.state.output = encodeOutput(job, output, counter);
      // Cog sends an output webhook for a returned value too (docs/http.md: "either once using return").
      await emit(job, 'output');
    }
    return finish(job, 'succeeded');
  }

  async function finish(job: Job, status: 'succeeded' | 'failed' | 'canceled'): Promise<void> {
    const completedAt = new Date();
    job.state.status = status;
    job.state.completed_at = pyTime(completedAt);
    // Cog measures predict_time only for a prediction that succeeded.
    if (status === 'succeeded') job.state.metrics = { predict_time: (Date.now() - job.startedAt) / 1000 };
    await emit(job, 'completed');
  }

  /**
   * The output as Cog encodes it: JSON as it is, each cog.Path (wherever it sits) a data: URI, or (async,
   * --upload-url) the URL it was uploaded to. `counter` numbers the files of one prediction.
   */
  function encodeOutput(job: Job, item: FakeCogOutput, counter: { files: number }): unknown {
    if (Array.isArray(item)) return item.map((i) => encodeOutput(job, i, counter));
    if (item === null || typeof item !== 'object') return item;
    if (!isFileRef(item)) {
      return Object.fromEntries(Object.entries(item).map(([k, v]) => [k, encodeOutput(job, v, counter)]));
    }
    const index = counter.files++;
    const file = files.get(item.file);
    if (!file) throw new Error(`fake cog has no file ${item.file}`);
    if (options.uploadFiles && job.async) {
      const name = index === 0 ? item.file : item.file.replace(/(\.[^.]+)?$/, `_${index}$1`);
      uploads.set(`${job.id}/${name}`, file);
      return uploadUrl(job.id, name);
    }
    return `data:${file.contentType};base64,${file.data.toString('base64')}`;
  }

  function uploadUrl(predictionId: string, name: string): string {
    return `${origin}/uploads/${encodeURIComponent(predictionId)}/${encodeURIComponent(name)}`;
  }

  /** Sends a webhook as Cog does: filtered, throttled unless terminal, terminal ones retried. */
  async function emit(job: Job, event: CogWebhookEvent): Promise<void> {
    const hook = job.webhook;
    if (!hook || job.silenced || !hook.events.has(event)) return;
    const terminal = event === 'completed';
    if (!terminal && Date.now() - job.lastSentAt < throttleMs) return;
    const body = structuredClone(job.state);
    const record: SentWebhook = { predictionId: job.id, event, url: hook.url, body, responseStatus: null };
    webhooks.push(record);
    for (let attempt = 1; attempt <= (terminal ? TERMINAL_ATTEMPTS : 1); attempt++) {
      try {
        const res = await fetch(hook.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'user-agent': WEBHOOK_USER_AGENT },
          body: JSON.stringify(body),
        });
        await res.arrayBuffer();
        record.responseStatus = res.status;
        if (res.status !== 429 && res.status < 500) break;
      } catch {
        record.responseStatus = null;
      }
      if (attempt < TERMINAL_ATTEMPTS && terminal) {
        await new Promise((resolve) => setTimeout(resolve, 50 * 2 ** attempt));
      }
    }
    job.lastSentAt = Date.now();
  }

  function cancel(ex: Exchange<CogBehavior>, id: string): void {
    const job = jobs.get(id);
    if (!job || job.stop.signal.aborted) {
      sendJson(ex.res, 404, {});
      return;
    }
    canceled.push(id);
    job.stop.abort();
    sendJson(ex.res, 200, {});
  }

  const server = await startRecordingServer<CogBehavior>(handle, {
    name: 'fake cog',
    behavior: options.behavior ?? {},
    errorBody: (message) => ({ detail: message }),
    resetIds: true,
  });
  origin = server.origin;

  /** Ends every job without a word more (a test that is over should not receive its webhooks). */
  async function silenceJobs(): Promise<void> {
    const running = [...jobs.values()];
    for (const job of running) {
      job.silenced = true;
      job.stop.abort();
    }
    await Promise.all(running.map((job) => job.done.catch(() => undefined)));
  }

  return {
    ...server,
    png,
    jpeg,
    pngDataUri: `data:image/png;base64,${png.toString('base64')}`,
    uploadUrl,
    canceled,
    webhooks,
    running: () => [...jobs.keys()],
    async idle(timeoutMs = 5000) {
      const until = Date.now() + timeoutMs;
      while (jobs.size > 0) {
        if (Date.now() > until) throw new Error(`fake cog still runs ${[...jobs.keys()].join(', ')}`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    },
    reset() {
      void silenceJobs();
      server.reset();
      canceled.length = 0;
      webhooks.length = 0;
      finished.clear();
      uploads.clear();
    },
    async close() {
      await silenceJobs();
      await server.close();
    },
  };
}

function isFileRef(value: object): value is { file: string } {
  const keys = Object.keys(value);
  return keys.length === 1 && keys[0] === 'file' && typeof (value as { file: unknown }).file === 'string';
}

/** FastAPI's validation of the request body: pydantic v1 messages, as Cog's Python server sends them. */
function validateRequest(body: JsonObject, input: JsonObject): JsonObject[] {
  const problems: JsonObject[] = [];
  const at = (field: string): string[] => ['body', 'input', field];
  if (input.prompt === undefined) {
    problems.push({ loc: at('prompt'), msg: 'field required', type: 'value_error.missing' });
  } else if (typeof input.prompt !== 'string') {
    problems.push({ loc: at('prompt'), msg: 'str type expected', type: 'type_error.str' });
  }
  for (const [field, allowed] of [
    ['aspect_ratio', ASPECT_RATIOS],
    ['output_format', OUTPUT_FORMATS],
  ] as const) {
    const value = input[field];
    if (value !== undefined && !allowed.includes(String(value))) {
      problems.push({
        loc: at(field),
        msg: `value is not a valid enumeration member; permitted: ${allowed.map((a) => `'${a}'`).join(', ')}`,
        type: 'type_error.enum',
        ctx: { enum_values: allowed },
      });
    }
  }
  const n = input.num_outputs;
  if (n !== undefined) {
    if (typeof n !== 'number' || !Number.isInteger(n)) {
      problems.push({
        loc: at('num_outputs'),
        msg: 'value is not a valid integer',
        type: 'type_error.integer',
      });
    } else if (n > 4) {
      problems.push({
        loc: at('num_outputs'),
        msg: 'ensure this value is less than or equal to 4',
        type: 'value_error.number.not_le',
        ctx: { limit_value: 4 },
      });
    } else if (n < 1) {
      problems.push({
        loc: at('num_outputs'),
        msg: 'ensure this value is greater than or equal to 1',
        type: 'value_error.number.not_ge',
        ctx: { limit_value: 1 },
      });
    }
  }
  if (
    body.webhook !== undefined &&
    !(typeof body.webhook === 'string' && /^https?:\/\//.test(body.webhook))
  ) {
    problems.push({
      loc: ['body', 'webhook'],
      msg: 'invalid or missing URL scheme',
      type: 'value_error.url.scheme',
    });
  }
  return problems;
}

function statusDetail(status: number): string {
  if (status === 503) return 'Service Unavailable';
  if (status >= 500) return 'Internal Server Error';
  if (status === 409) return 'Already running a prediction';
  return `HTTP ${status}`;
}

/** What Cog's worker logs when predict() raises. */
function traceback(error: string): string {
  return [
    'Traceback (most recent call last):',
    '  File "/usr/local/lib/python3.11/site-packages/cog/server/worker.py", line 331, in _predict',
    '    result = predict(**payload)',
    '  File "/src/predict.py", line 87, in predict',
    '    images = self.pipe(**args).images',
    `RuntimeError: ${error}`,
    '',
  ].join('\n');
}

/** Python's `datetime.isoformat()` of an aware UTC time: microseconds and `+00:00`. */
function pyTime(date: Date): string {
  return `${date.toISOString().slice(0, 23)}000+00:00`;
}

/** Cog's recommended id: a UUID, base32, lower case, padding removed (26 characters). */
function newPredictionId(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567';
  const bytes = randomBytes(16);
  let bits = 0;
  let value = 0;
  let out = '';
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += alphabet[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
  return out;
}

// ---- /openapi.json ----

/** What Cog's server publishes for an image model: FastAPI's document with the model's Input and Output. */
function openApiDocument(pollable: boolean, outputSchema: JsonObject | undefined): JsonObject {
  const json = (schema: JsonObject): JsonObject => ({ 'application/json': { schema } });
  const ok = (schema: JsonObject): JsonObject => ({
    '200': { description: 'Successful Response', content: json(schema) },
  });
  const validationError = {
    '422': {
      description: 'Validation Error',
      content: json({ $ref: '#/components/schemas/HTTPValidationError' }),
    },
  };
  const preferHeader = {
    in: 'header',
    name: 'prefer',
    required: false,
    schema: { title: 'Prefer', type: 'string' },
  };
  const idParameter = {
    in: 'path',
    name: 'prediction_id',
    required: true,
    schema: { title: 'Prediction ID', type: 'string' },
  };
  const predictionResponse = { $ref: '#/components/schemas/PredictionResponse' };
  const idempotentPath: JsonObject = {
    put: {
      summary: 'Predict Idempotent',
      description: 'Run a single prediction on the model (idempotent creation).',
      operationId: 'predict_idempotent_predictions__prediction_id__put',
      parameters: [idParameter, preferHeader],
      requestBody: {
        content: json({
          title: 'Prediction Request',
          allOf: [{ $ref: '#/components/schemas/PredictionRequest' }],
        }),
        required: true,
      },
      responses: { ...ok(predictionResponse), ...validationError },
    },
  };
  if (pollable) {
    idempotentPath.get = {
      summary: 'Get Prediction',
      operationId: 'get_prediction_predictions__prediction_id__get',
      parameters: [idParameter],
      responses: { ...ok(predictionResponse), ...validationError },
    };
  }
  return {
    openapi: '3.0.2',
    info: { title: 'Cog', version: '0.1.0' },
    paths: {
      '/': {
        get: { summary: 'Root', operationId: 'root__get', responses: ok({ title: 'Response Root  Get' }) },
      },
      '/health-check': {
        get: {
          summary: 'Healthcheck',
          operationId: 'healthcheck_health_check_get',
          responses: ok({ title: 'Response Healthcheck Health Check Get' }),
        },
      },
      '/predictions': {
        post: {
          summary: 'Predict',
          description: 'Run a single prediction on the model',
          operationId: 'predict_predictions_post',
          parameters: [preferHeader],
          requestBody: { content: json({ $ref: '#/components/schemas/PredictionRequest' }) },
          responses: { ...ok(predictionResponse), ...validationError },
        },
      },
      '/predictions/{prediction_id}': idempotentPath,
      '/predictions/{prediction_id}/cancel': {
        post: {
          summary: 'Cancel',
          description: 'Cancel a running prediction',
          operationId: 'cancel_predictions__prediction_id__cancel_post',
          parameters: [idParameter],
          responses: {
            ...ok({ title: 'Response Cancel Predictions  Prediction Id  Cancel Post' }),
            ...validationError,
          },
        },
      },
      '/shutdown': {
        post: {
          summary: 'Start Shutdown',
          operationId: 'start_shutdown_shutdown_post',
          responses: ok({ title: 'Response Start Shutdown Shutdown Post' }),
        },
      },
    },
    components: {
      schemas: {
        Input: {
          title: 'Input',
          type: 'object',
          required: ['prompt'],
          properties: {
            prompt: {
              title: 'Prompt',
              type: 'string',
              description: 'Prompt for generated image',
              'x-order': 0,
            },
            aspect_ratio: {
              allOf: [{ $ref: '#/components/schemas/aspect_ratio' }],
              description: 'Aspect ratio for the generated image',
              default: '1:1',
              'x-order': 1,
            },
            num_outputs: {
              title: 'Num Outputs',
              type: 'integer',
              description: 'Number of outputs to generate',
              default: 1,
              minimum: 1,
              maximum: 4,
              'x-order': 2,
            },
            seed: {
              title: 'Seed',
              type: 'integer',
              description: 'Random seed. Set for reproducible generation',
              'x-order': 3,
            },
            output_format: {
              allOf: [{ $ref: '#/components/schemas/output_format' }],
              description: 'Format of the output images',
              default: 'webp',
              'x-order': 4,
            },
          },
        },
        Output: outputSchema ?? { title: 'Output', type: 'array', items: { type: 'string', format: 'uri' } },
        aspect_ratio: {
          title: 'aspect_ratio',
          description: 'An enumeration.',
          enum: ASPECT_RATIOS,
          type: 'string',
        },
        output_format: {
          title: 'output_format',
          description: 'An enumeration.',
          enum: OUTPUT_FORMATS,
          type: 'string',
        },
        HTTPValidationError: {
          title: 'HTTPValidationError',
          type: 'object',
          properties: {
            detail: {
              title: 'Detail',
              type: 'array',
              items: { $ref: '#/components/schemas/ValidationError' },
            },
          },
        },
        PredictionRequest: {
          title: 'PredictionRequest',
          type: 'object',
          properties: {
            input: { $ref: '#/components/schemas/Input' },
            id: { title: 'Id', type: 'string' },
            created_at: { title: 'Created At', type: 'string', format: 'date-time' },
            output_file_prefix: { title: 'Output File Prefix', type: 'string' },
            webhook: { title: 'Webhook', maxLength: 65536, minLength: 1, type: 'string', format: 'uri' },
            webhook_events_filter: {
              type: 'array',
              items: { $ref: '#/components/schemas/WebhookEvent' },
              default: ['start', 'output', 'logs', 'completed'],
            },
          },
        },
        PredictionResponse: {
          title: 'PredictionResponse',
          type: 'object',
          properties: {
            input: { $ref: '#/components/schemas/Input' },
            output: { $ref: '#/components/schemas/Output' },
            id: { title: 'Id', type: 'string' },
            version: { title: 'Version', type: 'string' },
            created_at: { title: 'Created At', type: 'string', format: 'date-time' },
            started_at: { title: 'Started At', type: 'string', format: 'date-time' },
            completed_at: { title: 'Completed At', type: 'string', format: 'date-time' },
            logs: { title: 'Logs', type: 'string', default: '' },
            error: { title: 'Error', type: 'string' },
            status: { $ref: '#/components/schemas/Status' },
            metrics: { title: 'Metrics', type: 'object' },
          },
        },
        Status: {
          title: 'Status',
          description: 'An enumeration.',
          enum: ['starting', 'processing', 'succeeded', 'canceled', 'failed'],
          type: 'string',
        },
        ValidationError: {
          title: 'ValidationError',
          required: ['loc', 'msg', 'type'],
          type: 'object',
          properties: {
            loc: {
              title: 'Location',
              type: 'array',
              items: { anyOf: [{ type: 'string' }, { type: 'integer' }] },
            },
            msg: { title: 'Message', type: 'string' },
            type: { title: 'Error Type', type: 'string' },
          },
        },
        WebhookEvent: {
          title: 'WebhookEvent',
          description: 'An enumeration.',
          enum: ['start', 'output', 'logs', 'completed'],
          type: 'string',
        },
      },
    },
  };
}
