import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp } from '../../src/app.js';
import { generateKey, hashKey, keyPrefix } from '../../src/auth/keys.js';
import { syncAccounts } from '../../src/bootstrap.js';
import { parseConfig } from '../../src/config/load.js';
import { loggerOptions } from '../../src/logger.js';
import { SqliteStore } from '../../src/store/sqlite.js';

export interface TestGantry {
  /** e.g. http://127.0.0.1:PORT */
  origin: string;
  /** The OpenAI SDK's baseURL: origin + /v1 */
  baseURL: string;
  /** A key of the account `test`. */
  key: string;
  /** A key of the account `other`, which sees only public models. */
  otherKey: string;
  store: SqliteStore;
  app: Awaited<ReturnType<typeof buildApp>>['app'];
  /** The assembled Gantry: config, services (limiter, usage batcher, SQLite ledger, credits, metrics)… */
  gantry: Awaited<ReturnType<typeof buildApp>>['gantry'];
  close(): Promise<void>;
}

export interface StartOptions {
  /** Receives every log line (JSON) at trace level, with the production redaction rules. */
  onLog?: (line: string) => void;
  /** false: the inference routes are served by fastify only, without the node:http fast path. */
  fastPath?: boolean;
}

/** Starts a real Gantry (real HTTP on 127.0.0.1, random port) from YAML config text, with an in-memory store. */
export async function startGantry(
  yaml: string,
  env: NodeJS.ProcessEnv = {},
  options: StartOptions = {},
): Promise<TestGantry> {
  const config = parseConfig(yaml, 'test-config.yaml', env);
  config.server.port = 0;
  config.server.host = '127.0.0.1';
  // Output files and the secret key go to a throwaway folder, never the checkout's ./data.
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-test-'));
  config.server.dataDir = dataDir;
  if (!/files_dir/.test(yaml)) config.predictions.filesDir = join(dataDir, 'files');
  const store = new SqliteStore(':memory:');
  syncAccounts(store, config);
  const key = addKey(store, 'test');
  const otherKey = addKey(store, 'other');
  const onLog = options.onLog;
  const logger = onLog
    ? { ...loggerOptions('trace'), stream: { write: (line: string) => onLog(line) } }
    : false;
  const { app, gantry } = await buildApp(config, store, {
    logger,
    ...(options.fastPath === undefined ? {} : { fastPath: options.fastPath }),
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  const origin = `http://127.0.0.1:${port}`;
  return {
    origin,
    baseURL: `${origin}/v1`,
    key,
    otherKey,
    store,
    app,
    gantry,
    close: async () => {
      // A client may hold a keep-alive socket that just finished a download: do not wait for its timeout.
      const force = setTimeout(() => app.server.closeAllConnections(), 1_000);
      await app.close();
      clearTimeout(force);
      store.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export function addKey(store: SqliteStore, accountName: string): string {
  const account =
    store.getAccountByName(accountName) ?? store.upsertAccount(accountName, 'default', 'active');
  const key = generateKey();
  store.addKey(account.id, `${accountName}-key`, hashKey(key), keyPrefix(key));
  return key;
}

/** The embedded default's local models plus a private model and a predictions-only model. */
/**
 * One `models:` entry (YAML, to append after `models:`) for an Acme image model served on
 * /v1/predictions by `provider`; `extra` adds lines (each starting with a newline and four spaces).
 */
export function predictionModelYaml(namespace: string, provider: string, extra = ''): string {
  return `
  - namespace: ${namespace}
    name: ${namespace}
    type: image
    vendor: { name: Acme, slug: acme }
    serves: [predictions]
    routes: [{ provider: ${provider} }]${extra}`;
}

export const LOCAL_CONFIG = `
providers:
  local: { kind: local }
tiers:
  default: {}
models:
  - namespace: gantry/local-chat
    name: Local chat
    type: text
    vendor: { name: Gantry, slug: gantry }
    apis: [chat, responses]
    routes: [{ provider: local, model: local-chat }]
    defaults: { temperature: 0.7, top_p: 0.95, max_tokens: 8192 }
  - namespace: gantry/local-embed
    name: Local embeddings
    type: text
    vendor: { name: Gantry, slug: gantry }
    apis: [embeddings]
    routes: [{ provider: local, model: local-embed }]
  - namespace: acme/secret-chat
    name: Private chat
    type: text
    vendor: { name: Acme, slug: acme }
    accounts: [test]
    routes: [{ provider: local }]
    input_schema: { type: object, properties: { prompt: { type: string } } }
  - namespace: acme/image-gen
    name: Image generator
    type: image
    status: degraded
    vendor: { name: Acme, slug: acme }
    serves: [predictions]
    routes: [{ provider: local }]
    output_schema: { type: array, items: { type: string, format: uri } }
`;
