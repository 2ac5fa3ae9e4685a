import type { ProviderConfig } from '../../providers/types.js';
import type { SexualCutoffs } from '../safety/image/mapping.js';
import type { PolicyTable } from '../safety/policy.js';
import type { WebSettings } from './web.js';

export type Api = 'chat' | 'responses' | 'embeddings' | 'other';

/** One deployment of a model: a provider and the upstream model it serves (README, "Routing and health"). */
export interface ModelRoute {
  provider: string;
  /** The model name the upstream knows; defaults to the namespace. */
  model: string;
  /** true: this route can continue a chat stream that broke off (inference/rescue.ts). */
  continuation?: boolean;
  /** Share of the traffic under the `weighted` strategy (1 when absent). */
  weight?: number;
}

export type RoutingStrategy = 'priority' | 'weighted' | 'least_inflight' | 'latency';

/** When a deployment's circuit opens, and how it is tried again. */
export interface BreakerSettings {
  /** Consecutive failures that open the circuit. */
  consecutiveFailures: number;
  /** Error rate over the window that opens the circuit, once `minRequests` calls were seen. */
  errorRate: number;
  minRequests: number;
  /** The sliding window of the error rate and of the latency figures. */
  windowMs: number;
  /** How long an open circuit refuses calls before its half-open trials. */
  cooldownMs: number;
  /** Trial calls let through at once while half-open. */
  halfOpenRequests: number;
}

/** How a model's deployments are chosen and watched. */
export interface RoutingSettings {
  strategy: RoutingStrategy;
  /** A stream silent this long before its first token moves to the next deployment (unset: no limit). */
  firstTokenMs: number | undefined;
  breaker: BreakerSettings;
  /** A model is `degraded` over these (besides a deployment being open). */
  degraded: { errorRate: number; ttfbMs: number | undefined };
}

/** Active probes of idle deployments (off by default). */
export interface ProbeSettings {
  enabled: boolean;
  intervalMs: number;
  /** A deployment that carried no call for this long is probed. */
  idleMs: number;
  timeoutMs: number;
}

/** One catalog entry: the Model fields of spec 2.1 as the config gives them, plus routing. */
export interface ModelEntry {
  namespace: string;
  name: string;
  description?: string;
  type: string;
  privacy?: string;
  img_url?: string | null;
  vendor?: Record<string, unknown>;
  billable?: boolean;
  pricing?: Record<string, unknown>;
  capabilities?: string[];
  metadata?: Record<string, unknown>;
  status?: 'operational' | 'degraded' | 'offline';
  input_schema?: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
  created?: number;
  serves: Array<'inference' | 'predictions'>;
  apis: Api[];
  routes: ModelRoute[];
  /** A chat stream with no event for this long counts as broken (inference/rescue.ts); absent: no check. */
  stream_stall_ms?: number;
  /** Request defaults merged into inference bodies where the client left the field out. */
  defaults: Record<string, unknown>;
  /** When set, only these accounts see and use the model. */
  accounts?: string[];
  /** Overrides of the tiers' per-model ceilings for this model. */
  limits?: Ceilings;
  /** Prediction inputs the schema does not declare: refused (the default) or dropped and logged. */
  unknown_inputs?: 'refuse' | 'drop';
  /** Why the model is offline when Gantry took it offline at start (its input schema cannot be used). */
  status_reason?: string;
  /** The safety policy's name (README, "Safety"). */
  safety?: string;
  /** Deployment choice, breaker and status thresholds: the model's own over the global `routing` (the defaults when absent). */
  routing?: RoutingSettings;
}

/** Ceilings of one rate-limit bucket; an absent one is unlimited. */
export interface Ceilings {
  concurrency?: number;
  requests?: number;
  input_tokens?: number;
  output_tokens?: number;
}

export interface TierConfig {
  window_seconds?: number;
  account?: Ceilings;
  model?: Ceilings;
  models?: Record<string, Ceilings>;
}

export interface LimitSettings {
  failurePolicy: 'open' | 'closed';
  leaseMs: number;
  /** Output tokens reserved when a request names no maximum and the model has no default. */
  defaultMaxOutputTokens: number;
  redisTimeoutMs: number;
}

export interface CreditSettings {
  /** Credits per unit of each currency, e.g. { USD: 1000 }. */
  perCurrency: Record<string, number>;
  /** Balance of an account that was never granted credits. */
  defaultBalance: number | 'unlimited';
}

export interface UsageSettings {
  jsonlPath: string | undefined;
  flushMs: number;
  /** Redis Stream that billing consumes (distributed mode). */
  stream: string;
}

export interface MetricsSettings {
  enabled: boolean;
  /** Serve /metrics on its own port instead of the API's. */
  port: number | undefined;
  /** When set, /metrics requires `Authorization: Bearer <token>`. */
  token: string | undefined;
}

export interface AccountEntry {
  name: string;
  tier: string;
  status: 'active' | 'suspended';
  /** Keys whose value comes from the environment; stored hashed at start. */
  keys: Array<{ name: string; key: string; safety?: string }>;
  /** The safety policy's name for this account's requests. */
  safety?: string;
}

/** A remote safety classifier (README, "Safety"). */
export interface ClassifierConfig {
  name: string;
  kind: 'openai_moderations' | 'azure_content_safety';
  /** The moderations endpoint, or the Content Safety resource's endpoint. */
  url: string;
  apiKey: string | undefined;
  /** The moderation model to ask for (openai_moderations). */
  model: string | undefined;
  timeoutMs: number;
  onFailure: 'open' | 'closed';
}

export interface SafetySettings {
  /** Which policy each request gets: presets, `safety.policies`, and who names which. */
  table: PolicyTable;
  classifiers: ClassifierConfig[];
  /** Characters of a `block` stream held back until checked. */
  streamWindowChars: number;
  /** The image classifier's probability cut-offs (`safety.image`, README "Image outputs"). */
  imageCutoffs: Readonly<SexualCutoffs>;
}

export interface ServerSettings {
  host: string;
  port: number;
  dataDir: string;
  bodyLimitBytes: number;
  logLevel: string;
  /** Base of absolute URLs Gantry hands out; defaults to http://host:port. */
  publicUrl: string | undefined;
  /** A request's headers must arrive within this (then 408 REQUEST_TIMEOUT). */
  headersTimeoutMs: number;
  /** A request's headers and body must arrive within this (then 408 REQUEST_TIMEOUT). */
  requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this. */
  keepAliveTimeoutMs: number;
  /** Open connections from one client address; the next one is refused with 429 (0: no cap). */
  maxConnectionsPerIp: number;
  /**
   * Which proxies in front of Gantry to believe about the client (X-Forwarded-For, X-Forwarded-Proto):
   * none (false), every one (true), or those at these addresses and CIDR ranges (README, "server").
   */
  trustProxy: boolean | string[];
  /** Largest body of a backend's callback (Cog webhooks carry output files inline as data: URLs). */
  callbackBodyLimitBytes: number;
  /** How long SIGTERM waits for running requests and streams before ending them. */
  shutdownTimeoutMs: number;
}

export interface WebhookSettings {
  /** Let webhooks reach loopback, private and link-local addresses (tests, private networks). */
  allowPrivate: boolean;
  /** One delivery attempt's deadline. */
  timeoutMs: number;
  /** How long a delivery is retried before it is given up. */
  retrySpanMs: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
}

export type StorageSettings =
  | { kind: 'local' }
  | {
      kind: 's3';
      endpoint: string | undefined;
      region: string;
      bucket: string;
      prefix: string | undefined;
      accessKeyId: string;
      secretAccessKey: string;
      forcePathStyle: boolean;
    };

export interface PredictionSettings {
  /** How long `await: true` holds the request before answering with the prediction as it is. */
  awaitTimeoutMs: number;
  /** Output files are removed this long after completion. */
  retentionMs: number;
  /** Runs of one prediction (a crashed or failed worker's job is retried) before it fails. */
  maxAttempts: number;
  /** Predictions one worker process runs at once. */
  concurrency: number;
  /** A running job's lock (distributed mode): a worker silent this long is presumed dead, its job re-run. */
  workerLockMs: number;
  /** Deadline of the store and queue writes of a create: past it the caller gets 503 and nothing runs. */
  storeTimeoutMs: number;
  /** Largest file (decoded bytes) a prediction input may carry as a data: URI. */
  maxInputFileBytes: number;
  /** Folder of the local-disk file store. */
  filesDir: string;
  /** The output file store (credentials already read from the environment). */
  storage: StorageSettings;
  webhooks: WebhookSettings;
}

export interface GantryConfig {
  /** Where the configuration came from, for messages. */
  source: string;
  server: ServerSettings;
  providers: ProviderConfig[];
  models: ModelEntry[];
  tiers: Record<string, TierConfig>;
  accounts: AccountEntry[];
  limits: LimitSettings;
  credits: CreditSettings;
  usage: UsageSettings;
  metrics: MetricsSettings;
  predictions: PredictionSettings;
  safety: SafetySettings;
  /** Probes and the status history (each model's routing settings are on its entry). */
  routing: { probes: ProbeSettings; historyLimit: number };
  /** Admin keys, the console and the status page's incidents and e-mail (config/web.ts). */
  web: WebSettings;
  /** REDIS_URL or redis.url: set means distributed mode (shared limits, usage stream, credits). */
  redisUrl: string | undefined;
}
