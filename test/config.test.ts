import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, packageRoot, parseConfig } from '../src/config/load.js';

const MINIMAL = `
providers:
  up: { kind: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: UP_KEY, timeouts: { connect_ms: 100 } }
models:
  - namespace: vendor/model-a
    name: A
    type: text
    routes: [{ provider: up, model: served-name }]
`;

function problem(yaml: string, env: NodeJS.ProcessEnv = { UP_KEY: 'k' }): string {
  try {
    parseConfig(yaml, 'gantry.yaml', env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('the config was accepted');
}

describe('configuration', () => {
  it('loads the embedded default with the local models', () => {
    const config = loadConfig(join(packageRoot(), 'config', 'gantry.yaml'), {});
    expect(config.providers.map((p) => p.kind)).toEqual(['local']);
    expect(config.models.map((m) => m.namespace)).toEqual([
      'gantry/local-chat',
      'gantry/local-embed',
      'gantry/local-image',
      'gantry/local-speech',
      'gantry/local-video',
    ]);
    expect(config.models[0]?.description).toMatch(/local test model/i);
    expect(config.models[0]?.defaults).toEqual({ temperature: 0.7, top_p: 0.95, max_tokens: 8192 });
    // The chat model's answers are annotated (README, "Safety"); embeddings have no text to check.
    expect(Object.fromEntries(config.safety.table.byModel)).toEqual({
      'gantry/local-chat': 'annotate',
      'gantry/local-image': 'annotate',
      'gantry/local-speech': 'annotate',
      'gantry/local-video': 'annotate',
    });
    expect(config.safety.table.defaultPolicy).toBe('off');
    expect(config.server.port).toBe(8080);
  });

  it('reads credentials from the environment and fills defaults', () => {
    const config = parseConfig(MINIMAL, 'gantry.yaml', { UP_KEY: 'secret' });
    const provider = config.providers[0];
    expect(provider?.apiKey).toBe('secret');
    expect(provider?.timeouts.connectMs).toBe(100);
    expect(provider?.timeouts.firstByteMs).toBeGreaterThan(0);
    expect(config.models[0]?.routes).toEqual([{ provider: 'up', model: 'served-name' }]);
    expect(config.models[0]?.serves).toEqual(['inference']);
  });

  it('PORT and HOST override the file', () => {
    const config = parseConfig(MINIMAL, 'gantry.yaml', { UP_KEY: 'k', PORT: '9999', HOST: '0.0.0.0' });
    expect(config.server).toMatchObject({ port: 9999, host: '0.0.0.0' });
    expect(problem(MINIMAL, { UP_KEY: 'k', PORT: 'eighty' })).toMatch(/PORT/);
  });

  it('refuses an account key from the environment shorter than 32 characters', () => {
    const withKey = `${MINIMAL}\naccounts:\n  - name: acme\n    keys: [{ name: ci, key_env: ACME_KEY }]\n`;
    expect(problem(withKey, { UP_KEY: 'k', ACME_KEY: 'secret123' })).toBe(
      'gantry.yaml: /accounts/0/keys/0/key_env: the key in ACME_KEY is too short (9 characters): it needs at least 32 random characters, e.g. `openssl rand -hex 32`',
    );
    const config = parseConfig(withKey, 'gantry.yaml', { UP_KEY: 'k', ACME_KEY: 'k'.repeat(32) });
    expect(config.accounts[0]?.keys[0]?.key).toBe('k'.repeat(32));
  });

  it('names the path and the problem of a bad file', () => {
    expect(problem(MINIMAL, {})).toBe(
      'gantry.yaml: /providers/up/api_key_env: environment variable UP_KEY is not set',
    );
    expect(problem(MINIMAL.replace('kind: openai', 'kind: nope'))).toMatch(
      /^gantry\.yaml: \/providers\/up\/kind: .*openai, anthropic, local/,
    );
    expect(problem(MINIMAL.replace('provider: up', 'provider: down'))).toBe(
      'gantry.yaml: /models/0/routes/0/provider: unknown provider "down"',
    );
    expect(problem(MINIMAL.replace('name: A', 'name: A\n    colour: blue'))).toMatch(
      /\/models\/0: .*\(colour\)/,
    );
    expect(problem(MINIMAL.replace('connect_ms: 100', 'connect_ms: -1'))).toMatch(
      /\/providers\/up\/timeouts\/connect_ms/,
    );
    expect(problem('providers: [')).toMatch(/^gantry\.yaml: invalid YAML/);
    expect(
      problem(
        `${MINIMAL}  - namespace: vendor/model-a\n    name: B\n    type: text\n    routes: [{ provider: up }]\n`,
      ),
    ).toMatch(/duplicate model "vendor\/model-a"/);
  });

  it('reports an unreadable file by its path', () => {
    const dir = mkdtempSync(join(tmpdir(), 'gantry-config-'));
    expect(() => loadConfig(join(dir, 'missing.yaml'))).toThrow(
      /missing\.yaml: cannot read the file \(ENOENT\)/,
    );
    const file = join(dir, 'bad.yaml');
    writeFileSync(file, 'server: { port: "x" }');
    expect(() => loadConfig(file)).toThrow(/bad\.yaml: \/server\/port: must be integer/);
  });
});

describe('configuration of limits, credits and metering', () => {
  it('reads the server timeouts, connection cap and callback limit, with defaults', () => {
    const defaults = parseConfig(MINIMAL, 'gantry.yaml', { UP_KEY: 'k' }).server;
    expect(defaults).toMatchObject({
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 60_000,
      keepAliveTimeoutMs: 72_000,
      maxConnectionsPerIp: 1024,
      callbackBodyLimitBytes: 64 * 1024 * 1024,
    });
    const set = parseConfig(
      `server: { headers_timeout_ms: 500, request_timeout_ms: 900, keep_alive_timeout_ms: 700, max_connections_per_ip: 0, callback_body_limit_bytes: 2048 }\n${MINIMAL}`,
      'gantry.yaml',
      { UP_KEY: 'k' },
    ).server;
    expect(set).toMatchObject({
      headersTimeoutMs: 500,
      requestTimeoutMs: 900,
      keepAliveTimeoutMs: 700,
      maxConnectionsPerIp: 0,
      callbackBodyLimitBytes: 2048,
    });
    expect(problem(`server: { headers_timeout_ms: 5000, request_timeout_ms: 1000 }\n${MINIMAL}`)).toContain(
      '/server/request_timeout_ms: must not be less than headers_timeout_ms',
    );
  });

  it('reads server.trust_proxy: off by default, true, or addresses and ranges checked at load', () => {
    const trust = (value: string) =>
      parseConfig(`server: { trust_proxy: ${value} }\n${MINIMAL}`, 'gantry.yaml', { UP_KEY: 'k' }).server
        .trustProxy;
    expect(parseConfig(MINIMAL, 'gantry.yaml', { UP_KEY: 'k' }).server.trustProxy).toBe(false);
    expect(trust('true')).toBe(true);
    expect(trust('[10.0.0.0/8, "::1", loopback, "2001:db8::/32"]')).toEqual([
      '10.0.0.0/8',
      '::1',
      'loopback',
      '2001:db8::/32',
    ]);
    expect(problem(`server: { trust_proxy: [10.0.0.0/33] }\n${MINIMAL}`)).toContain(
      '/server/trust_proxy/0: "10.0.0.0/33" is not an IP address, a CIDR range',
    );
    expect(problem(`server: { trust_proxy: [proxy.internal] }\n${MINIMAL}`)).toContain(
      '/server/trust_proxy/0',
    );
    expect(problem(`server: { trust_proxy: 2 }\n${MINIMAL}`)).toContain('/server/trust_proxy');
  });

  it('reads tiers, limits, credits, usage and metrics settings with defaults', () => {
    const config = parseConfig(
      `${MINIMAL}
tiers:
  pro:
    window_seconds: 30
    account: { concurrency: 5, requests: 100 }
    model: { input_tokens: 1000 }
    models: { vendor/model-a: { concurrency: 1 } }
limits: { failure_policy: closed, lease_seconds: 30 }
credits: { per_currency: { USD: 500 }, default_balance: 25 }
metrics: { token_env: METRICS_TOKEN }
`,
      'gantry.yaml',
      { UP_KEY: 'k', METRICS_TOKEN: 'scrape-me' },
    );
    expect(config.tiers.pro?.models?.['vendor/model-a']).toEqual({ concurrency: 1 });
    expect(config.limits).toMatchObject({
      failurePolicy: 'closed',
      leaseMs: 30_000,
      defaultMaxOutputTokens: 4096,
    });
    expect(config.credits).toEqual({ perCurrency: { USD: 500 }, defaultBalance: 25 });
    expect(config.metrics).toEqual({ enabled: true, port: undefined, token: 'scrape-me' });
    expect(config.redisUrl).toBeUndefined();
    expect(parseConfig(MINIMAL, 'g.yaml', { UP_KEY: 'k', REDIS_URL: 'redis://127.0.0.1:1' }).redisUrl).toBe(
      'redis://127.0.0.1:1',
    );
  });

  it('names the problem in limits, pricing and credits settings', () => {
    expect(problem(`${MINIMAL}tiers:\n  pro:\n    account: { concurrency: 0 }\n`)).toMatch(
      /\/tiers\/pro\/account\/concurrency/,
    );
    expect(problem(`${MINIMAL}tiers:\n  pro:\n    models: { nobody/else: { requests: 1 } }\n`)).toMatch(
      /\/tiers\/pro\/models\/nobody\/else: unknown model/,
    );
    expect(
      problem(MINIMAL.replace('type: text', 'type: text\n    pricing: { amount: 1, currency: USD }')),
    ).toMatch(/\/models\/0/);
    expect(
      problem(
        MINIMAL.replace(
          'type: text',
          'type: text\n    billable: true\n    pricing: { amount: 1, currency: EUR, unit: million_token }',
        ),
      ),
    ).toMatch(/no credit rate for EUR/);
    expect(problem(`${MINIMAL}limits: { failure_policy: maybe }\n`)).toMatch(/\/limits\/failure_policy/);
  });
});

describe('configuration of predictions under failures', () => {
  it('reads the worker lock, the create deadline and the run cap, with defaults', () => {
    const defaults = parseConfig(MINIMAL, 'g.yaml', { UP_KEY: 'k' }).predictions;
    expect(defaults).toMatchObject({ maxAttempts: 2, workerLockMs: 30_000, storeTimeoutMs: 1_000 });
    const set = parseConfig(
      `${MINIMAL}predictions: { max_attempts: 3, worker_lock_seconds: 2.5, store_timeout_ms: 400 }\n`,
      'g.yaml',
      { UP_KEY: 'k' },
    ).predictions;
    expect(set).toMatchObject({ maxAttempts: 3, workerLockMs: 2_500, storeTimeoutMs: 400 });
  });

  it('names a worker lock or create deadline out of range', () => {
    expect(problem(`${MINIMAL}predictions: { worker_lock_seconds: 0 }\n`)).toMatch(
      /\/predictions\/worker_lock_seconds/,
    );
    expect(problem(`${MINIMAL}predictions: { store_timeout_ms: 10 }\n`)).toMatch(
      /\/predictions\/store_timeout_ms/,
    );
  });
});
