/**
 * Crashes lose nothing (distributed mode): real `gantry serve` processes (test/helpers/gantry-process.ts)
 * and a real redis-server with AOF (test/helpers/redis.ts), a fake Cog server as the backend.
 *
 * - A webhook delivery written with its prediction's status by a worker that died before queueing it
 *   (the outbox's crash window) is delivered by the next worker at its start, not at the first sweep.
 * - Redis stopped while a prediction runs and started again a few seconds later on the same data: the
 *   prediction ends succeeded with its outputs, run once.
 * - A bus error before the backend call (Redis refuses SUBSCRIBE): the job goes back to the queue, the
 *   prediction stays starting with no run counted, and runs once when the bus is back.
 * - A final write applied whose answer was lost (Redis drops the client over its output buffer limit):
 *   the worker recognises its own write and records the end once (metrics, usage, notifications).
 * - A create while Redis is down answers 503 PREDICTION_ERROR with Retry-After within its deadline
 *   (predictions.store_timeout_ms); once Redis is back nothing of it runs, and the same Idempotency-Key
 *   creates the prediction.
 * - A worker SIGKILLed mid-prediction: another worker takes the job over within 1.5 worker locks
 *   (predictions.worker_lock_seconds: 2 here); killed again, the prediction fails: it ran twice, never
 *   three times.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { RedisPredictionStore } from '../../src/predictions/store-redis.js';
import { type FakeCog, startFakeCog } from '../helpers/fake-cog.js';
import { type GantryProcess, spawnGantry, stopAllGantry } from '../helpers/gantry-process.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { type Res, restCall } from '../helpers/rest.js';
import { removeTempDirs, tempDir } from '../helpers/temp-dirs.js';
import { sleep, until, waitFor } from '../helpers/wait.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

const KEY = 'gty_e2e-predictions-crash-0123456789abcdefghijklmn';
const SECRET_KEY = randomBytes(32).toString('hex');
const LOCK_SECONDS = 2;
const TERMINAL = ['succeeded', 'failed', 'canceled'];

interface Prediction {
  id: string;
  status: string;
  output: string[] | null;
  error: string | null;
}

let redis: TestRedis;
let cog: FakeCog;
let config: string;
let receiver: WebhookReceiver | undefined;

beforeAll(async () => {
  [redis, cog] = await Promise.all([startRedis({ aof: true }), startFakeCog({ concurrency: 4 })]);
  config = join(tempDir('gantry-crash-config-'), 'gantry.yaml');
  writeFileSync(
    config,
    `
server:
  log_level: warn
providers:
  cog: { kind: cog, base_url: "${cog.origin}" }
tiers:
  default: {}
accounts:
  - name: test
    keys: [{ name: k, key_env: TEST_KEY }]
predictions:
  files_dir: ${JSON.stringify(tempDir('gantry-crash-files-'))}
  worker_lock_seconds: ${LOCK_SECONDS}
  store_timeout_ms: 500
  webhooks: { allow_private: true, backoff_base_ms: 100, backoff_max_ms: 500, timeout_ms: 2000 }
models:
  - namespace: acme/flux
    name: Flux
    type: image
    vendor: { name: Acme, slug: acme }
    serves: [predictions]
    routes: [{ provider: cog }]
`,
  );
});

afterEach(async () => {
  await stopAllGantry(2_000);
  await receiver?.close();
  receiver = undefined;
  await cog.idle(15_000).catch(() => undefined);
  cog.reset();
  // Every test starts from an empty Redis, with no job of an earlier one left.
  await flushRedis();
});

afterAll(async () => {
  await stopAllGantry(1_000);
  await cog?.close();
  await redis?.close();
  removeTempDirs();
});

async function flushRedis(): Promise<void> {
  const client = new Redis(redis.url);
  await client.flushall();
  await client.quit();
}

/** A worker's links name the api's address (a worker serves no API); the others their own. */
function gantry(name: string, role: 'api' | 'worker' | 'all', api?: GantryProcess): Promise<GantryProcess> {
  return spawnGantry({
    name,
    config,
    dataDir: tempDir(`gantry-crash-data-${name}-`),
    startTimeoutMs: 60_000,
    env: {
      REDIS_URL: redis.url,
      GANTRY_ROLE: role,
      GANTRY_SECRET_KEY: SECRET_KEY,
      TEST_KEY: KEY,
      ...(api ? { GANTRY_PUBLIC_URL: api.origin } : {}),
    },
  });
}

function call<T = Prediction>(
  g: GantryProcess,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Res<T>> {
  return restCall<T>(g.origin, method, path, { key: KEY, body, headers });
}

async function create(g: GantryProcess, body: Record<string, unknown>): Promise<Prediction> {
  const res = await call(g, 'POST', '/v1/predictions', body);
  if (res.status !== 200) throw new Error(`create on ${g.name}: ${res.status} ${res.text}`);
  return res.body;
}

/** The prediction once terminal; GETs that fail (Redis still coming back) are tried again. */
function terminal(g: GantryProcess, id: string, timeoutMs = 30_000): Promise<Prediction> {
  return waitFor(
    `prediction ${id} to end`,
    async () => {
      const res = await call(g, 'GET', `/v1/predictions/${id}`).catch(() => undefined);
      return res?.status === 200 && TERMINAL.includes(res.body.status) ? res.body : undefined;
    },
    timeoutMs,
    100,
  );
}

/** The predictions the fake Cog server was asked to run (not the schema reads nor cancels). */
function runs(): number {
  return cog.requests.filter((r) => r.method === 'PUT' || (r.method === 'POST' && r.path === '/predictions'))
    .length;
}

/**
 * A synchronous Cog run goes on after its client (a killed worker) is gone, and Cog answers a second
 * PUT of that id with 202 (nothing to wait on). Here the run dies with its worker, as a local backend's
 * would: the next worker's run then really runs.
 */
async function stopOrphan(id: string): Promise<void> {
  await fetch(`${cog.origin}/predictions/${encodeURIComponent(id)}/cancel`, { method: 'POST' });
  await until('the orphaned run to stop', () => !cog.running().includes(id), 5_000);
}

describeRedis('predictions: crashes lose nothing (distributed)', () => {
  // Two cold process starts (tsx) under load, then at most a few seconds of recovery.
  it('a delivery written with its status but never queued (the worker died) goes out when a worker starts', async () => {
    const api = await gantry('api', 'api');
    const secret = (await call<{ key: string }>(api, 'GET', '/v1/webhooks/secret')).body.key;
    receiver = await startWebhookReceiver({ secret });
    const created = await create(api, {
      model: 'acme/flux',
      input: { prompt: 'a fox' },
      webhook: { url: receiver.url, events: ['completed'] },
    });

    // What a worker killed right after its final write leaves behind: the prediction succeeded and its
    // webhook delivery pending in the store (one write, the outbox), no job for the delivery.
    const client = new Redis(redis.url);
    const store = new RedisPredictionStore(client);
    const now = Date.now();
    const deliveryId = `msg_${randomUUID().replaceAll('-', '')}`;
    const body = JSON.stringify({ id: created.id, status: 'succeeded', webhook_event_type: 'completed' });
    const written = await store.update(created.id, { status: 'succeeded', completedAt: now }, undefined, [
      {
        id: deliveryId,
        event: 'prediction.succeeded',
        body,
        state: 'pending',
        attempts: 0,
        createdAt: now,
        nextAttemptAt: now,
        log: [],
      },
    ]);
    await client.quit();
    expect(written?.status).toBe('succeeded');

    await gantry('worker', 'worker', api);
    // Well before the first sweep (30 s after start, for deliveries due 30 s before).
    const [got] = await receiver.waitFor(1, 10_000);
    expect(got?.headers['webhook-id']).toBe(deliveryId);
    expect(got?.rawBody).toBe(body);
    expect(got?.signatureValid).toBe(true);
    await until(
      'the delivery to be recorded as delivered',
      async () =>
        (
          await call<{ data: Array<{ id: string; state: string }> }>(
            api,
            'GET',
            `/v1/predictions/${created.id}/webhooks`,
          )
        ).body.data.some((d) => d.id === deliveryId && d.state === 'delivered'),
      5_000,
      100,
    );
  }, 90_000);

  it('Redis stopped while a prediction runs and started again: it ends succeeded with its outputs, run once', async () => {
    const g = await gantry('all', 'all');
    // About 2 s of work on the backend. Redis goes down shortly before it answers, so the worker's writes
    // of the outcome meet the outage in its first seconds, when ioredis fails queued commands (later
    // in an outage it holds them until Redis is back).
    cog.setBehavior({ stepMs: 400, logs: ['step 1', 'step 2', 'step 3', 'step 4'] });
    const created = await create(g, { model: 'acme/flux', input: { prompt: 'a fox in the snow' } });
    await until('the backend to run it', () => cog.running().length === 1, 15_000);
    await sleep(1_200);
    await redis.stop();
    await until('the backend to finish during the outage', () => cog.running().length === 0, 15_000);
    // A 15 s outage, as measured: the worker holds its outputs and cannot write them.
    await sleep(15_000);
    await redis.start();

    const done = await terminal(g, created.id, 60_000);
    expect(done.error).toBeNull();
    expect(done.status).toBe('succeeded');
    expect(done.output).toHaveLength(1);
    const file = await fetch(String(done.output?.[0]));
    expect(file.status).toBe(200);
    expect(runs()).toBe(1);
  }, 120_000);

  it('a bus error before the backend call sends the job back to the queue: no failure, no run counted', async () => {
    const g = await gantry('bus-refused', 'all');
    const admin = new Redis(redis.url);
    await admin.call('ACL', 'LOG', 'RESET');
    // Redis refuses SUBSCRIBE from now on: the worker's subscription to the prediction's cancel channel
    // fails for real, after the job was taken and before the backend is called.
    await admin.call('ACL', 'SETUSER', 'default', '-subscribe');
    try {
      const created = await create(g, { model: 'acme/flux', input: { prompt: 'a fox' } });
      await until(
        'the worker to be refused its subscription',
        async () => JSON.stringify(await admin.call('ACL', 'LOG')).includes('subscribe'),
        15_000,
        100,
      );
      const key = `gantry:pred:{${created.id}}`;
      expect(await admin.hmget(key, 'status', 'attempts', 'error')).toEqual(['"starting"', '0', 'null']);
      expect(runs()).toBe(0);
      await admin.call('ACL', 'SETUSER', 'default', '+subscribe');
      // The queue's retry (backoff) runs it once the bus is back.
      const done = await terminal(g, created.id, 30_000);
      expect(done.error).toBeNull();
      expect(done.status).toBe('succeeded');
      expect(await admin.hget(key, 'attempts')).toBe('1');
      expect(runs()).toBe(1);
    } finally {
      await admin.call('ACL', 'SETUSER', 'default', '+subscribe');
      await admin.quit();
    }
  }, 90_000);

  it('a final write applied whose answer was lost: the worker still records the end once', async () => {
    const g = await gantry('reply-lost', 'all');
    const admin = new Redis(redis.url);
    // The text output makes the final write's answer (the whole prediction) large; Redis drops a
    // client whose answer outgrows this limit, after the write is applied.
    cog.setBehavior({ logs: ['one line'], output: 'x'.repeat(256 * 1024) });
    await admin.config('SET', 'client-output-buffer-limit', 'normal 64kb 0 0');
    try {
      const created = await create(g, { model: 'acme/flux', input: { prompt: 'a long text' } });
      const key = `gantry:pred:{${created.id}}`;
      await until(
        'the final write to be applied',
        async () => (await admin.hget(key, 'status')) === '"succeeded"',
        30_000,
        100,
      );
      await admin.config('SET', 'client-output-buffer-limit', 'normal 0 0 0');
      const done = /gantry_predictions_total\{model="acme\/flux",status="succeeded"\} 1\b/;
      await until(
        'the end to be recorded (usage, metrics, notifications)',
        async () => done.test(await (await fetch(`${g.origin}/metrics`)).text()),
        20_000,
        200,
      );
      expect(runs()).toBe(1);
    } finally {
      await admin.config('SET', 'client-output-buffer-limit', 'normal 0 0 0');
      await admin.quit();
    }
  }, 90_000);

  it('a create while Redis is down answers 503 with Retry-After in time; nothing of it runs later', async () => {
    const g = await gantry('all', 'all');
    await redis.kill();
    const started = Date.now();
    const res = await call(
      g,
      'POST',
      '/v1/predictions',
      { model: 'acme/flux', input: { prompt: 'x' } },
      {
        'idempotency-key': 'outage-1',
      },
    );
    const took = Date.now() - started;
    expect(res.status, res.text).toBe(503);
    expect((res.body as unknown as { error: { error_id: string } }).error.error_id).toBe('PREDICTION_ERROR');
    expect(res.headers.get('retry-after')).toBe('1');
    // store_timeout_ms is 500; admission (limiter, failing open) adds its own short deadline.
    expect(took).toBeLessThan(2_500);
    // Later in an outage ioredis holds commands until Redis is back instead of failing them: this
    // create's writes reach Redis after its caller got 503, and must not make a prediction then.
    await sleep(8_000);
    const held = Date.now();
    const second = await call(g, 'POST', '/v1/predictions', { model: 'acme/flux', input: { prompt: 'y' } });
    expect(second.status, second.text).toBe(503);
    expect(Date.now() - held).toBeLessThan(2_500);

    await redis.start();
    // Once the store answers again: nothing was accepted, so nothing is listed and nothing ran.
    const list = await waitFor(
      'the store to answer again',
      async () => {
        const r = await call<{ data: Prediction[]; pagination: { total: number } }>(
          g,
          'GET',
          '/v1/predictions',
        );
        return r.status === 200 ? r.body : undefined;
      },
      20_000,
      200,
    );
    expect(list.data).toEqual([]);
    expect(list.pagination.total).toBe(0);
    // The same key after the outage creates the prediction, which runs once.
    const retried = await call(
      g,
      'POST',
      '/v1/predictions',
      { model: 'acme/flux', input: { prompt: 'x' } },
      {
        'idempotency-key': 'outage-1',
      },
    );
    expect(retried.status, retried.text).toBe(200);
    expect((await terminal(g, retried.body.id)).status).toBe('succeeded');
    // Long enough for a create that was held back by the outage to have shown up.
    await sleep(2_000);
    const after = await call<{ data: Prediction[] }>(g, 'GET', '/v1/predictions');
    expect(after.body.data.map((p) => p.id)).toEqual([retried.body.id]);
    expect(runs()).toBe(1);
  }, 120_000);

  it('a SIGKILLed worker’s prediction is taken over within 1.5 locks; a second kill fails it: at most two runs', async () => {
    const api = await gantry('api', 'api');
    const first = await gantry('worker-1', 'worker', api);
    cog.setBehavior({ stepMs: 1_000, logs: ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'] });
    const created = await create(api, { model: 'acme/flux', input: { prompt: 'a long fox' } });
    await until('the first worker to run it', () => runs() === 1, 20_000);
    const second = await gantry('worker-2', 'worker', api);
    expect(runs()).toBe(1);

    first.kill('SIGKILL');
    await first.exited;
    const killedAt = Date.now();
    await stopOrphan(created.id);
    await until('another worker to take it over', () => runs() === 2, 20_000, 20).catch((error: Error) => {
      throw new Error(`${error.message}; worker-2 said:\n${second.output()}`);
    });
    const takeover = Date.now() - killedAt;
    // BullMQ's default lock took 35-40 s here; now at most 1.5 locks, plus a little for a busy machine.
    expect(takeover).toBeLessThan(LOCK_SECONDS * 1_500 + 3_000);

    const third = await gantry('worker-3', 'worker', api);
    await until('the second run to be under way', () => cog.running().length === 1, 10_000);
    second.kill('SIGKILL');
    await second.exited;
    await stopOrphan(created.id);
    const done = await terminal(api, created.id, 30_000);
    expect(done.status).toBe('failed');
    expect(done.error).toMatch(/stopped 2 times/);
    expect(runs()).toBe(2);
    expect(third.dead).toBe(false);
  }, 150_000);
});
