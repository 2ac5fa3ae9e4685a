/**
 * Split roles must share GANTRY_SECRET_KEY and the file store: an instance that does not refuses to start
 * with one line that says what to share (src/predictions/shared-state.ts). A worker, which serves no API,
 * never makes an API key. Real `gantry serve` processes (an api and a worker) on a real redis-server.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import Database from 'libsql';
import { afterAll, afterEach, beforeEach, expect, it } from 'vitest';
import { SECRET_KEY, secretFingerprint } from '../../src/predictions/shared-state.js';
import { type GantryProcess, spawnGantry, stopAllGantry } from '../helpers/gantry-process.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { removeTempDirs, tempDir } from '../helpers/temp-dirs.js';

const SECRET_A = 'a1'.repeat(32);
const SECRET_B = 'b2'.repeat(32);
const KEY = 'gty_e2e-split-roles-bootstrap-0123456789abcdefghijkl';

function config(redis: TestRedis, filesDir: string, storage = '{ kind: local }', predictions = true): string {
  const path = join(tempDir('gantry-split-config-'), 'gantry.yaml');
  writeFileSync(
    path,
    `
server:
  log_level: warn
providers:
  local: { kind: local }
tiers:
  default: {}
redis: { url: "${redis.url}" }
predictions:
  files_dir: ${filesDir}
  storage: ${storage}
models:
  - namespace: gantry/local-chat
    name: Local chat
    type: text
    vendor: { name: Gantry, slug: gantry }
    apis: [chat]
    routes: [{ provider: local, model: local-chat }]
${
  predictions
    ? `  - namespace: gantry/local-image
    name: Local image
    type: image
    vendor: { name: Gantry, slug: gantry }
    serves: [predictions]
    routes: [{ provider: local, model: local-image }]`
    : ''
}
`,
  );
  return path;
}

function start(
  role: 'api' | 'worker',
  configPath: string,
  secret: string,
  name: string = role,
  dataDir = tempDir(`gantry-split-${role}-`),
  bootstrapKey: string | undefined = KEY,
): Promise<GantryProcess> {
  return spawnGantry({
    name,
    config: configPath,
    dataDir,
    env: {
      GANTRY_ROLE: role,
      GANTRY_SECRET_KEY: secret,
      ...(bootstrapKey === undefined ? {} : { GANTRY_BOOTSTRAP_KEY: bootstrapKey }),
      GANTRY_PUBLIC_URL: 'http://127.0.0.1:9',
      S3_ID: 'test-id',
      S3_SECRET: 'test-secret',
    },
  });
}

/** The one line a refused start printed (the process exited 1 before listening). */
async function refusal(started: Promise<GantryProcess>): Promise<string> {
  const error = await started.then(
    () => new Error('it started'),
    (err: Error) => err,
  );
  expect(error.message).toMatch(/exited \(1\) before listening/);
  const lines = error.message
    .split('\n')
    .slice(1)
    .filter((line) => line.trim() !== '');
  expect(lines).toHaveLength(1);
  return lines[0] as string;
}

describeRedis('split roles on one Redis', () => {
  let redis: TestRedis;
  beforeEach(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    await stopAllGantry(3_000);
    await redis.close();
  });
  afterAll(() => removeTempDirs());

  it('start together when they share the secret and the files folder', async () => {
    const files = tempDir('gantry-split-files-');
    const configPath = config(redis, files);
    await start('api', configPath, SECRET_A);
    await start('worker', configPath, SECRET_A);
    expect(existsSync(join(files, '.gantry-files-id'))).toBe(true);
    // Only a fingerprint of the secret is kept, never the secret.
    const client = new Redis(redis.url);
    try {
      const kept = await client.get(SECRET_KEY);
      expect(kept).toBe(secretFingerprint(Buffer.from(SECRET_A, 'hex')));
      expect(kept).not.toContain(SECRET_A);
    } finally {
      client.disconnect();
    }
  }, 90_000);

  it('a worker started first on an empty data dir makes no API key, with or without GANTRY_BOOTSTRAP_KEY', async () => {
    const configPath = config(redis, tempDir('gantry-split-files-'));
    for (const bootstrapKey of [undefined, KEY]) {
      const dataDir = tempDir('gantry-split-worker-');
      const worker = await start('worker', configPath, SECRET_A, 'worker', dataDir, bootstrapKey);
      expect(worker.output()).not.toContain('Created account');
      await worker.stop();
      const db = new Database(join(dataDir, 'gantry.db'));
      try {
        expect((db.prepare('SELECT COUNT(*) AS n FROM api_keys').get() as { n: number }).n).toBe(0);
      } finally {
        db.close();
      }
    }
  }, 90_000);

  it('a worker with another GANTRY_SECRET_KEY refuses to start and says what to share', async () => {
    const configPath = config(redis, tempDir('gantry-split-files-'));
    await start('api', configPath, SECRET_A);
    const line = await refusal(start('worker', configPath, SECRET_B));
    expect(line).toMatch(/^gantry: GANTRY_SECRET_KEY .* same GANTRY_SECRET_KEY$/);
    expect(line).not.toContain(SECRET_A);
    expect(line).not.toContain(SECRET_B);
  }, 90_000);

  it('a worker with another files folder refuses to start and says what to share', async () => {
    await start('api', config(redis, tempDir('gantry-split-files-')), SECRET_A);
    const other = tempDir('gantry-split-files-');
    const line = await refusal(start('worker', config(redis, other), SECRET_A));
    expect(line).toMatch(/^gantry: predictions\.files_dir .* shared volume/);
    expect(line).toContain(other);
  }, 90_000);

  it('an S3 file store is not checked for a marker', async () => {
    const s3 =
      '{ kind: s3, endpoint: "http://127.0.0.1:9", region: us-east-1, bucket: outputs, access_key_env: S3_ID, secret_key_env: S3_SECRET }';
    await start('api', config(redis, tempDir('gantry-split-files-'), s3), SECRET_A);
    await start('worker', config(redis, tempDir('gantry-split-files-'), s3), SECRET_A);
  }, 90_000);

  it('instances without prediction models are not checked', async () => {
    const inferenceOnly = (files: string) => config(redis, files, undefined, false);
    await start('api', inferenceOnly(tempDir('gantry-split-files-')), SECRET_A, 'api-1');
    await start('api', inferenceOnly(tempDir('gantry-split-files-')), SECRET_B, 'api-2');
  }, 90_000);
});
