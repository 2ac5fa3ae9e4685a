/**
 * The contract between Gantry's prediction workers and the backends that run media models (Cog servers,
 * partner prediction APIs, Gantry's built-in local models).
 *
 * A worker calls `run` once per attempt with the validated input (defaults applied, secrets still in
 * it: a backend may need the caller's partner key). The backend reports progress through `events` and
 * resolves with its outputs; it throws BackendError (or any error) on failure. When `signal` aborts
 * (the caller canceled, or the worker is shutting down) the backend must stop the remote work too
 * (e.g. POST /predictions/{id}/cancel on a Cog server) and reject promptly.
 */

export type JsonObject = Record<string, unknown>;

export interface BackendJob {
  /** Gantry's prediction id (a UUID); usable as the remote prediction's id where the backend lets us set it. */
  predictionId: string;
  /** The model name the backend knows (the catalog route's `model`). */
  model: string;
  /** Validated input with defaults applied. May hold secrets: never log it. */
  input: JsonObject;
  /** Whether the caller asked for a stream of incremental output. */
  stream: boolean;
  /**
   * The model's output schema as the catalogue has it, where it has one: tells files (`format: uri`) from
   * plain strings and a concatenated text stream from a list (outputs.ts).
   */
  outputSchema?: JsonObject;
}

/** What a backend may report while it runs; every method is optional to call and cheap. */
export interface BackendEvents {
  /** The model started working (status processing; fires `prediction.started`). Idempotent. */
  processing(): void;
  /** A line (or lines) of log text. */
  log(text: string): void;
  /** Progress 0-100, where the backend knows it (video). */
  progress(percent: number): void;
  /** A piece of incremental output for stream subscribers (text token, partial URL). */
  output(piece: string): void;
}

/**
 * One output of a finished prediction. Bytes are stored by Gantry and served from its own signed URLs;
 * a URL is downloaded by Gantry (with the backend's credentials where needed) and stored the same way;
 * text is returned as it is (text models run as predictions).
 */
export type BackendOutput =
  | { kind: 'bytes'; data: Buffer; contentType: string; name: string }
  | {
      kind: 'url';
      url: string;
      headers?: Record<string, string>;
      /** On the backend's own origin: the only URL a provider's `allow_private_outputs` exempts. */
      ownOrigin?: true;
    }
  | { kind: 'text'; text: string };

/** Where a file sits inside an output value: object keys and list indexes from the top. */
export type OutputPath = Array<string | number>;

/** A file of a shaped output: bytes the backend sent inline, or a URL Gantry downloads. */
export type FileOutput = Exclude<BackendOutput, { kind: 'text' }>;

/**
 * An output kept in the shape the model produced it: `value` is its JSON with every file left where it
 * was (the worker puts a signed link of the stored copy at each `files[i].path`).
 */
export interface ShapedOutput {
  value: unknown;
  files: Array<{ path: OutputPath; file: FileOutput }>;
  /** The value is one text joined from pieces (a concatenated iterator): it streams as text pieces. */
  text?: true;
}

export interface BackendResult {
  /** Files and texts, in order (built-in models, text models): text is joined, files are listed. Empty when `output` is set. */
  outputs: BackendOutput[];
  /** The output in the model's own shape (Cog, Replicate); when set, `outputs` is not read. */
  output?: ShapedOutput;
  /** Seconds the model itself worked, where the backend measured it; else the worker measures. */
  predictTime?: number;
  logs?: string;
}

export interface BackendContext {
  signal: AbortSignal;
  events: BackendEvents;
}

export interface PredictionBackend {
  /** The provider's name in the config. */
  readonly name: string;
  /** `cog`, `replicate` or `local`. */
  readonly kind: string;
  run(job: BackendJob, ctx: BackendContext): Promise<BackendResult>;
  /**
   * The model's input and output schemas as the backend publishes them (a Cog server's /openapi.json),
   * read once at start; undefined where the backend publishes none (the catalog's schemas are used).
   */
  schemas?(model: string): Promise<{ input?: JsonObject; output?: JsonObject } | undefined>;
  close(): Promise<void>;
}

/**
 * A failure the backend classifies. `retryable` failures (connection refused, 5xx before the model ran)
 * may be retried by the queue; others fail the prediction at once with `message` as its `error` string.
 * The message is shown to the caller: it must not contain secrets.
 */
export class BackendError extends Error {
  readonly retryable: boolean;
  constructor(message: string, options: { retryable?: boolean; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = 'BackendError';
    this.retryable = options.retryable ?? false;
  }
}

export interface BackendConfig {
  name: string;
  kind: string;
  /** cog: the Cog server's origin; replicate: the partner API's base URL. */
  baseUrl?: string;
  /** replicate: a default partner token when the caller gives none (optional). */
  apiKey?: string;
  /**
   * cog: where the Cog server can POST its async webhooks back to this Gantry worker; unset = synchronous.
   * A function when the origin is known only once the server listens.
   */
  callbackUrl?: string | (() => string);
  /** How long one prediction may run before it is failed with a timeout. */
  timeoutMs: number;
  /** replicate: how often to poll when no webhook is used. */
  pollIntervalMs?: number;
}
