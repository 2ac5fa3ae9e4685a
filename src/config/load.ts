import { existsSync, readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { parseDocument } from 'yaml';
import type { ProviderConfig, ProviderTimeouts } from '../../providers/types.js';
import { MIN_KEY_LENGTH } from '../auth/keys.js';
import { validatePricing } from '../metering/pricing.js';
import { buildProbes, buildRouting, type RawGlobalRouting, type RawRouting } from '../routing/settings.js';
import { buildSafety, type RawSafety } from './safety.js';
import { configSchema } from './schema.js';
import type {
  AccountEntry,
  Api,
  GantryConfig,
  ModelEntry,
  PredictionSettings,
  ServerSettings,
  StorageSettings,
  TierConfig,
} from './types.js';
import { buildWeb, type RawWeb } from './web.js';

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const DEFAULT_TIMEOUTS: ProviderTimeouts = {
  connectMs: 5_000,
  firstByteMs: 120_000,
  idleMs: 60_000,
  totalMs: 600_000,
};

/** The package's own folder, found from this file whether it runs from src/ or dist/src/. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new ConfigError('cannot find the gantry package folder');
    dir = parent;
  }
  return dir;
}

/** --config wins, then GANTRY_CONFIG, then ./config/gantry.yaml, then the package's embedded default. */
export function resolveConfigPath(cliPath: string | undefined, env: NodeJS.ProcessEnv): string {
  const explicit = cliPath ?? env.GANTRY_CONFIG;
  if (explicit) return resolve(explicit);
  const local = resolve('config/gantry.yaml');
  if (existsSync(local)) return local;
  return join(packageRoot(), 'config', 'gantry.yaml');
}

export function loadConfig(path: string, env: NodeJS.ProcessEnv = process.env): GantryConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`${path}: cannot read the file (${(err as NodeJS.ErrnoException).code ?? err})`);
  }
  return parseConfig(text, path, env);
}

export function parseConfig(
  text: string,
  source: string,
  env: NodeJS.ProcessEnv = process.env,
): GantryConfig {
  const doc = parseDocument(text, { prettyErrors: true });
  if (doc.errors.length > 0) {
    throw new ConfigError(`${source}: invalid YAML: ${doc.errors[0]?.message}`);
  }
  const raw: unknown = doc.toJS() ?? {};
  const ajv = new Ajv2020({ allErrors: false, strict: false });
  const validate = ajv.compile(configSchema);
  if (!validate(raw)) {
    const e = validate.errors?.[0];
    const where = e?.instancePath || '/';
    const extra =
      e?.keyword === 'additionalProperties'
        ? ` (${String((e.params as { additionalProperty?: string }).additionalProperty)})`
        : e?.keyword === 'enum'
          ? ` (${((e.params as { allowedValues?: unknown[] }).allowedValues ?? []).join(', ')})`
          : '';
    throw new ConfigError(`${source}: ${where}: ${e?.message ?? 'invalid'}${extra}`);
  }
  return build(raw as RawConfig, source, env);
}

interface RawTimeouts {
  connect_ms?: number;
  first_byte_ms?: number;
  idle_ms?: number;
  total_ms?: number;
}

interface RawProvider {
  kind: string;
  base_url?: string;
  api_key_env?: string;
  timeouts?: RawTimeouts;
  max_connections?: number;
  supports_responses?: boolean;
  headers?: Record<string, string>;
  embedding_dimensions?: number;
  chunk_delay_ms?: number;
  context_length?: number;
  max_output_tokens?: number;
  async?: boolean;
  poll_interval_ms?: number;
  allow_private_outputs?: boolean;
}

interface RawConfig extends RawWeb {
  server?: {
    host?: string;
    port?: number;
    data_dir?: string;
    body_limit_bytes?: number;
    log_level?: string;
    public_url?: string;
    headers_timeout_ms?: number;
    request_timeout_ms?: number;
    keep_alive_timeout_ms?: number;
    max_connections_per_ip?: number;
    trust_proxy?: boolean | string[];
    callback_body_limit_bytes?: number;
    shutdown_timeout_seconds?: number;
  };
  provider_defaults?: { timeouts?: RawTimeouts; max_connections?: number };
  providers?: Record<string, RawProvider>;
  models?: Array<Omit<ModelEntry, 'routes' | 'serves' | 'apis' | 'defaults' | 'routing'> & RawModelRouting>;
  tiers?: Record<string, TierConfig>;
  accounts?: Array<{
    name: string;
    tier?: string;
    status?: 'active' | 'suspended';
    safety?: string;
    keys?: RawKey[];
  }>;
  safety?: RawSafety;
  routing?: RawGlobalRouting;
  limits?: {
    failure_policy?: 'open' | 'closed';
    lease_seconds?: number;
    default_max_output_tokens?: number;
    redis_timeout_ms?: number;
  };
  credits?: { per_currency?: Record<string, number>; default_balance?: number | 'unlimited' };
  usage?: { jsonl_path?: string; flush_ms?: number; stream?: string };
  metrics?: { enabled?: boolean; port?: number; token_env?: string };
  redis?: { url?: string };
  predictions?: {
    await_timeout_seconds?: number;
    retention_minutes?: number;
    max_attempts?: number;
    concurrency?: number;
    worker_lock_seconds?: number;
    store_timeout_ms?: number;
    max_input_file_bytes?: number;
    files_dir?: string;
    storage?: {
      kind: 'local' | 's3';
      endpoint?: string;
      region?: string;
      bucket?: string;
      prefix?: string;
      access_key_env?: string;
      secret_key_env?: string;
      force_path_style?: boolean;
    };
    webhooks?: {
      allow_private?: boolean;
      timeout_ms?: number;
      retry_span_seconds?: number;
      backoff_base_ms?: number;
      backoff_max_ms?: number;
    };
  };
}

interface RawModelRouting {
  routes: Array<{ provider: string; model?: string; continuation?: boolean; weight?: number }>;
  routing?: RawRouting;
  serves?: Array<'inference' | 'predictions'>;
  apis?: Api[];
  defaults?: Record<string, unknown>;
}

interface RawKey {
  name: string;
  key_env: string;
  safety?: string;
}

function build(raw: RawConfig, source: string, env: NodeJS.ProcessEnv): GantryConfig {
  const fail = (where: string, problem: string): never => {
    throw new ConfigError(`${source}: ${where}: ${problem}`);
  };

  const server = buildServer(raw.server ?? {}, env, fail);
  const defaults = raw.provider_defaults ?? {};
  const providers: ProviderConfig[] = Object.entries(raw.providers ?? {}).map(([name, p]) => {
    let apiKey: string | undefined;
    if (p.api_key_env !== undefined) {
      apiKey = env[p.api_key_env];
      if (!apiKey) fail(`/providers/${name}/api_key_env`, `environment variable ${p.api_key_env} is not set`);
    }
    return {
      name,
      kind: p.kind,
      baseUrl: p.base_url,
      apiKey,
      timeouts: mergeTimeouts(mergeTimeouts(DEFAULT_TIMEOUTS, defaults.timeouts), p.timeouts),
      maxConnections: p.max_connections ?? defaults.max_connections ?? 128,
      supportsResponses: p.supports_responses ?? false,
      headers: p.headers ?? {},
      ...(p.embedding_dimensions === undefined ? {} : { embeddingDimensions: p.embedding_dimensions }),
      ...(p.chunk_delay_ms === undefined ? {} : { chunkDelayMs: p.chunk_delay_ms }),
      ...(p.context_length === undefined ? {} : { contextLength: p.context_length }),
      ...(p.max_output_tokens === undefined ? {} : { maxOutputTokens: p.max_output_tokens }),
      ...(p.async === undefined ? {} : { async: p.async }),
      ...(p.poll_interval_ms === undefined ? {} : { pollIntervalMs: p.poll_interval_ms }),
      ...(p.allow_private_outputs === undefined ? {} : { allowPrivateOutputs: p.allow_private_outputs }),
    };
  });
  const providerNames = new Set(providers.map((p) => p.name));

  const tiers = raw.tiers ?? { default: {} };
  const accounts: AccountEntry[] = (raw.accounts ?? []).map((a, i) => {
    const tier = a.tier ?? 'default';
    if (!(tier in tiers)) fail(`/accounts/${i}/tier`, `unknown tier "${tier}"`);
    return {
      name: a.name,
      tier,
      status: a.status ?? 'active',
      keys: (a.keys ?? []).map((k, j) => {
        const key = env[k.key_env];
        if (!key) fail(`/accounts/${i}/keys/${j}/key_env`, `environment variable ${k.key_env} is not set`);
        else if (key.length < MIN_KEY_LENGTH) {
          fail(
            `/accounts/${i}/keys/${j}/key_env`,
            `the key in ${k.key_env} is too short (${key.length} characters): it needs at least ${MIN_KEY_LENGTH} random characters, e.g. \`openssl rand -hex 32\``,
          );
        }
        return { name: k.name, key: key as string, ...(k.safety === undefined ? {} : { safety: k.safety }) };
      }),
      ...(a.safety === undefined ? {} : { safety: a.safety }),
    };
  });

  const seen = new Set<string>();
  const models: ModelEntry[] = (raw.models ?? []).map((m, i) => {
    if (seen.has(m.namespace)) fail(`/models/${i}/namespace`, `duplicate model "${m.namespace}"`);
    seen.add(m.namespace);
    m.routes.forEach((r, j) => {
      if (!providerNames.has(r.provider))
        fail(`/models/${i}/routes/${j}/provider`, `unknown provider "${r.provider}"`);
      // Only these kinds have a way to continue an assistant message (inference/rescue.ts).
      const kind = providers.find((p) => p.name === r.provider)?.kind;
      if (r.continuation === true && kind !== 'openai' && kind !== 'anthropic' && kind !== 'local')
        fail(
          `/models/${i}/routes/${j}/continuation`,
          `provider "${r.provider}" (kind ${kind}) cannot continue a stream: only kinds openai (vLLM), anthropic and local can`,
        );
    });
    if (m.pricing !== undefined) {
      const problem = validatePricing(m.pricing);
      if (problem) fail(`/models/${i}/pricing`, problem);
    }
    const serves = m.serves ?? ['inference'];
    const apis = m.apis ?? (serves.includes('inference') ? (['chat', 'responses'] as Api[]) : []);
    return {
      ...m,
      serves,
      apis,
      routes: m.routes.map((r) => ({
        provider: r.provider,
        model: r.model ?? m.namespace,
        ...(r.continuation === true ? { continuation: true } : {}),
        ...(r.weight === undefined ? {} : { weight: r.weight }),
      })),
      defaults: m.defaults ?? {},
      routing: buildRouting(raw.routing ?? {}, m.routing),
    };
  });

  for (const [name, tier] of Object.entries(tiers)) {
    for (const namespace of Object.keys(tier.models ?? {})) {
      if (!seen.has(namespace)) fail(`/tiers/${name}/models/${namespace}`, `unknown model "${namespace}"`);
    }
  }

  const perCurrency = raw.credits?.per_currency ?? { USD: 1000 };
  for (const m of models) {
    const currency = String(m.pricing?.currency ?? 'USD');
    if (m.billable && !(currency in perCurrency)) {
      fail(`/credits/per_currency`, `no credit rate for ${currency}, the currency of ${m.namespace}`);
    }
  }

  const metricsTokenEnv = raw.metrics?.token_env;
  const metricsToken = metricsTokenEnv ? env[metricsTokenEnv] : undefined;
  if (metricsTokenEnv && !metricsToken)
    fail('/metrics/token_env', `environment variable ${metricsTokenEnv} is not set`);

  return {
    source,
    server,
    providers,
    models,
    tiers,
    accounts,
    limits: {
      failurePolicy: raw.limits?.failure_policy ?? 'open',
      leaseMs: Math.round((raw.limits?.lease_seconds ?? 600) * 1000),
      defaultMaxOutputTokens: raw.limits?.default_max_output_tokens ?? 4096,
      redisTimeoutMs: raw.limits?.redis_timeout_ms ?? 200,
    },
    credits: { perCurrency, defaultBalance: raw.credits?.default_balance ?? 'unlimited' },
    usage: {
      jsonlPath: raw.usage?.jsonl_path ? resolve(raw.usage.jsonl_path) : undefined,
      flushMs: raw.usage?.flush_ms ?? 250,
      stream: raw.usage?.stream ?? 'gantry:{usage}',
    },
    metrics: { enabled: raw.metrics?.enabled ?? true, port: raw.metrics?.port, token: metricsToken },
    predictions: buildPredictions(raw.predictions ?? {}, server.dataDir, env, fail),
    safety: buildSafety(raw.safety ?? {}, models, accounts, env, fail),
    routing: {
      probes: buildProbes(raw.routing?.probes),
      historyLimit: raw.routing?.history?.max_entries ?? 10_000,
    },
    web: buildWeb(raw, env, fail),
    redisUrl: env.REDIS_URL || raw.redis?.url || undefined,
  };
}

function buildPredictions(
  raw: NonNullable<RawConfig['predictions']>,
  dataDir: string,
  env: NodeJS.ProcessEnv,
  fail: (where: string, problem: string) => never,
): PredictionSettings {
  const webhooks = raw.webhooks ?? {};
  let storage: StorageSettings = { kind: 'local' };
  const s3 = raw.storage;
  if (s3?.kind === 's3') {
    const secret = (name: 'access_key_env' | 'secret_key_env'): string => {
      const variable = s3[name] as string;
      const value = env[variable];
      if (!value) fail(`/predictions/storage/${name}`, `environment variable ${variable} is not set`);
      return value as string;
    };
    storage = {
      kind: 's3',
      endpoint: s3.endpoint,
      region: s3.region as string,
      bucket: s3.bucket as string,
      prefix: s3.prefix,
      accessKeyId: secret('access_key_env'),
      secretAccessKey: secret('secret_key_env'),
      forcePathStyle: s3.force_path_style ?? false,
    };
  }
  return {
    awaitTimeoutMs: Math.round((raw.await_timeout_seconds ?? 60) * 1000),
    retentionMs: Math.round((raw.retention_minutes ?? 15) * 60_000),
    maxAttempts: raw.max_attempts ?? 2,
    concurrency: raw.concurrency ?? 8,
    workerLockMs: Math.round((raw.worker_lock_seconds ?? 30) * 1000),
    storeTimeoutMs: raw.store_timeout_ms ?? 1_000,
    maxInputFileBytes: raw.max_input_file_bytes ?? 10 * 1024 * 1024,
    filesDir: raw.files_dir ? resolve(raw.files_dir) : join(dataDir, 'files'),
    storage,
    webhooks: {
      allowPrivate: webhooks.allow_private ?? false,
      timeoutMs: webhooks.timeout_ms ?? 10_000,
      retrySpanMs: Math.round((webhooks.retry_span_seconds ?? 24 * 3600) * 1000),
      backoffBaseMs: webhooks.backoff_base_ms ?? 1_000,
      backoffMaxMs: webhooks.backoff_max_ms ?? 10 * 60_000,
    },
  };
}

function buildServer(
  raw: NonNullable<RawConfig['server']>,
  env: NodeJS.ProcessEnv,
  fail: (where: string, problem: string) => never,
): ServerSettings {
  let port = raw.port ?? 8080;
  if (env.PORT !== undefined && env.PORT !== '') {
    port = Number(env.PORT);
    if (!Number.isInteger(port) || port < 0 || port > 65535) fail('PORT', `not a port number: ${env.PORT}`);
  }
  const headersTimeoutMs = raw.headers_timeout_ms ?? 10_000;
  const requestTimeoutMs = raw.request_timeout_ms ?? 60_000;
  if (requestTimeoutMs < headersTimeoutMs) {
    fail('/server/request_timeout_ms', 'must not be less than headers_timeout_ms');
  }
  return {
    host: env.HOST || raw.host || '127.0.0.1',
    port,
    dataDir: resolve(env.GANTRY_DATA_DIR || raw.data_dir || 'data'),
    bodyLimitBytes: raw.body_limit_bytes ?? 4 * 1024 * 1024,
    logLevel: env.LOG_LEVEL || raw.log_level || 'info',
    publicUrl: env.GANTRY_PUBLIC_URL || raw.public_url,
    headersTimeoutMs,
    requestTimeoutMs,
    keepAliveTimeoutMs: raw.keep_alive_timeout_ms ?? 72_000,
    maxConnectionsPerIp: raw.max_connections_per_ip ?? 1024,
    trustProxy: trustedProxies(raw.trust_proxy, fail),
    callbackBodyLimitBytes: raw.callback_body_limit_bytes ?? 64 * 1024 * 1024,
    shutdownTimeoutMs: (raw.shutdown_timeout_seconds ?? 10) * 1000,
  };
}

/** The names fastify's proxy matching knows for address ranges, besides addresses and CIDR ranges. */
const PROXY_RANGE_NAMES = new Set(['loopback', 'linklocal', 'uniquelocal']);

function trustedProxies(
  raw: boolean | string[] | undefined,
  fail: (where: string, problem: string) => never,
): boolean | string[] {
  if (!Array.isArray(raw)) return raw ?? false;
  raw.forEach((entry, i) => {
    const [address = '', bits, extra] = entry.split('/');
    const family = isIP(address);
    const prefixOk =
      bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= (family === 6 ? 128 : 32));
    if (PROXY_RANGE_NAMES.has(entry) || (family !== 0 && prefixOk && extra === undefined)) return;
    fail(
      `/server/trust_proxy/${i}`,
      `"${entry}" is not an IP address, a CIDR range (10.0.0.0/8) or one of loopback, linklocal, uniquelocal`,
    );
  });
  return raw;
}

function mergeTimeouts(base: ProviderTimeouts, raw: RawTimeouts | undefined): ProviderTimeouts {
  if (!raw) return base;
  return {
    connectMs: raw.connect_ms ?? base.connectMs,
    firstByteMs: raw.first_byte_ms ?? base.firstByteMs,
    idleMs: raw.idle_ms ?? base.idleMs,
    totalMs: raw.total_ms ?? base.totalMs,
  };
}
