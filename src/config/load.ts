import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { parseDocument } from 'yaml';
import type { ProviderConfig, ProviderTimeouts } from '../../providers/types.js';
import { configSchema } from './schema.js';
import type { AccountEntry, Api, GantryConfig, ModelEntry, ServerSettings } from './types.js';

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
}

interface RawConfig {
  server?: {
    host?: string;
    port?: number;
    data_dir?: string;
    body_limit_bytes?: number;
    log_level?: string;
    public_url?: string;
  };
  provider_defaults?: { timeouts?: RawTimeouts; max_connections?: number };
  providers?: Record<string, RawProvider>;
  models?: Array<Omit<ModelEntry, 'routes' | 'serves' | 'apis' | 'defaults'> & RawModelRouting>;
  tiers?: Record<string, Record<string, unknown>>;
  accounts?: Array<{ name: string; tier?: string; status?: 'active' | 'suspended'; keys?: RawKey[] }>;
}

interface RawModelRouting {
  routes: Array<{ provider: string; model?: string }>;
  serves?: Array<'inference' | 'predictions'>;
  apis?: Api[];
  defaults?: Record<string, unknown>;
}

interface RawKey {
  name: string;
  key_env: string;
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
        return { name: k.name, key: key as string };
      }),
    };
  });

  const seen = new Set<string>();
  const models: ModelEntry[] = (raw.models ?? []).map((m, i) => {
    if (seen.has(m.namespace)) fail(`/models/${i}/namespace`, `duplicate model "${m.namespace}"`);
    seen.add(m.namespace);
    m.routes.forEach((r, j) => {
      if (!providerNames.has(r.provider))
        fail(`/models/${i}/routes/${j}/provider`, `unknown provider "${r.provider}"`);
    });
    const serves = m.serves ?? ['inference'];
    const apis = m.apis ?? (serves.includes('inference') ? (['chat', 'responses'] as Api[]) : []);
    return {
      ...m,
      serves,
      apis,
      routes: m.routes.map((r) => ({ provider: r.provider, model: r.model ?? m.namespace })),
      defaults: m.defaults ?? {},
    };
  });

  return { source, server, providers, models, tiers, accounts };
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
  return {
    host: env.HOST || raw.host || '127.0.0.1',
    port,
    dataDir: resolve(env.GANTRY_DATA_DIR || raw.data_dir || 'data'),
    bodyLimitBytes: raw.body_limit_bytes ?? 4 * 1024 * 1024,
    logLevel: env.LOG_LEVEL || raw.log_level || 'info',
    publicUrl: env.GANTRY_PUBLIC_URL || raw.public_url,
  };
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
