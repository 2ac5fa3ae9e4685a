/**
 * A partner-served model (spec 2.2) end to end: a real Gantry with a `replicate` provider pointing at the
 * fake Replicate API (test/helpers/fake-replicate.ts). The caller pays the partner with their own key,
 * sent inside `input` as `replicate_api_key` (`format: password` in the model's input_schema).
 *
 * The key must be used as the Bearer token of the partner calls and nothing else: never forwarded as an
 * input field, shown as `**********` in the Prediction object (GET, list, webhooks), and absent from
 * every HTTP response body, webhook, row of the SQLite store and log line (captured at trace level).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  FAKE_OFFICIAL_MODEL,
  FAKE_PNG,
  FAKE_REPLICATE_TOKEN,
  type FakeReplicate,
  startFakeReplicate,
} from '../helpers/fake-replicate.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { sleep } from '../helpers/wait.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

type Json = Record<string, unknown>;

/** The caller's partner key: the fake accepts it. */
const KEY = FAKE_REPLICATE_TOKEN;
/** A well-formed key the fake does not know. */
const WRONG_KEY = 'r8_revoked_caller_token_9876543210';
const REDACTED = '**********';
const PNG_DATA_URI = `data:image/png;base64,${FAKE_PNG.toString('base64')}`;
const TERMINAL = new Set(['succeeded', 'failed', 'canceled']);

let fake: FakeReplicate;
let gantry: TestGantry;
let receiver: WebhookReceiver;
/** Every log line Gantry wrote, at trace level. */
const logLines: string[] = [];
/** Every HTTP response body Gantry sent to this test. */
const responseBodies: string[] = [];

async function call(method: string, path: string, body?: unknown) {
  const headers: Record<string, string> = { 'x-api-key': gantry.key };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(gantry.origin + path, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  responseBodies.push(text);
  let json: Json = {};
  try {
    json = JSON.parse(text) as Json;
  } catch {
    // not JSON
  }
  return { status: res.status, body: json, text };
}

async function create(body: Json) {
  const res = await call('POST', '/v1/predictions', body);
  expect(res.status, res.text).toBe(200);
  return res.body;
}

async function get(id: string) {
  const res = await call('GET', `/v1/predictions/${id}`);
  expect(res.status, res.text).toBe(200);
  return res.body;
}

async function waitFor(id: string, done = (p: Json) => TERMINAL.has(String(p.status)), timeoutMs = 8_000) {
  const until = Date.now() + timeoutMs;
  let last: Json = {};
  while (Date.now() < until) {
    last = await get(id);
    if (done(last)) return last;
    await sleep(25);
  }
  throw new Error(`prediction ${id} did not get there in ${timeoutMs} ms; last: ${JSON.stringify(last)}`);
}

/** Every row of every table of Gantry's SQLite store, as text. */
function wholeDatabase(): string {
  const db = gantry.store.handle;
  const tables = db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table'`).all() as Array<{
    name: string;
  }>;
  expect(tables.map((t) => t.name)).toContain('predictions');
  return tables
    .map((t) => `${t.name}: ${JSON.stringify(db.prepare(`SELECT * FROM "${t.name}"`).all())}`)
    .join('\n');
}

/** The fake's requests that carried an Authorization header, and with which token. */
function bearerTokens(): string[] {
  return fake.requests.map((r) => String(r.headers.authorization ?? '').replace(/^Bearer /, ''));
}

beforeAll(async () => {
  fake = await startFakeReplicate();
  gantry = await startGantry(
    `
providers:
  replicate: { kind: replicate, base_url: "${fake.url}", poll_interval_ms: 20, allow_private_outputs: true }
tiers:
  default: {}
predictions:
  max_attempts: 2
  webhooks: { allow_private: true, backoff_base_ms: 50, backoff_max_ms: 200 }
models:
  - namespace: partner/model
    name: Partner model
    type: image
    vendor: { name: Partner, slug: partner }
    serves: [predictions]
    capabilities: [partner]
    metadata: { inference_party: partner }
    routes: [{ provider: replicate, model: ${FAKE_OFFICIAL_MODEL} }]
    input_schema:
      type: object
      properties:
        prompt: { type: string, 'x-order': 0 }
        replicate_api_key: { type: string, format: password, 'x-order': 1 }
    output_schema: { type: array, items: { type: string, format: uri } }
`,
    {},
    { onLog: (line) => logLines.push(line) },
  );
  const secret = (await call('GET', '/v1/webhooks/secret')).body.key as string;
  receiver = await startWebhookReceiver({ secret });
});

afterAll(async () => {
  await gantry?.close();
  await fake?.close();
  await receiver?.close();
});

beforeEach(() => {
  fake.reset();
  receiver.reset();
});

describe('a partner model paid with the caller key', () => {
  it('uses the key as the Bearer token, never as an input field, and shows it masked', async () => {
    fake.setBehavior({ output: { kind: 'raw', value: [PNG_DATA_URI] } });
    const created = await create({
      model: 'partner/model',
      input: { prompt: 'a lighthouse', replicate_api_key: KEY },
      webhook: { url: receiver.url },
      stream: true,
    });
    expect((created.input as Json).replicate_api_key).toBe(REDACTED);
    expect((created.input as Json).prompt).toBe('a lighthouse');
    const id = String(created.id);
    const done = await waitFor(id);
    expect(done.status, JSON.stringify(done)).toBe('succeeded');

    // The partner saw the key as the Bearer token of every call, and not in the input.
    expect(fake.predictions).toHaveLength(1);
    const partner = fake.predictions[0];
    expect(partner?.token).toBe(KEY);
    expect(partner?.model).toBe(FAKE_OFFICIAL_MODEL);
    expect(partner?.input).toEqual({ prompt: 'a lighthouse' });
    expect(fake.requests.length).toBeGreaterThanOrEqual(1);
    expect(bearerTokens()).toEqual(fake.requests.map(() => KEY));
    for (const request of fake.requests) expect(request.rawBody.toString()).not.toContain(KEY);

    // GET, list and the webhooks all show it masked.
    expect((done.input as Json).replicate_api_key).toBe(REDACTED);
    const list = await call('GET', '/v1/predictions?model=partner/model');
    expect(list.status).toBe(200);
    const listed = (list.body.data as Json[]).find((p) => p.id === id);
    expect((listed?.input as Json | undefined)?.replicate_api_key).toBe(REDACTED);
    const deliveries = await receiver.waitFor(2);
    expect(deliveries.map((d) => d.event)).toEqual(['prediction.started', 'prediction.succeeded']);
    for (const d of deliveries) {
      expect(d.signatureValid, d.signatureError).toBe(true);
      expect((d.body?.input as Json | undefined)?.replicate_api_key).toBe(REDACTED);
      expect(d.rawBody).not.toContain(KEY);
    }

    // The output is Gantry's copy.
    const [url] = done.output as string[];
    expect(String(url).startsWith(`${gantry.origin}/v1/files/`)).toBe(true);
    const file = Buffer.from(await (await fetch(String(url))).arrayBuffer());
    expect(file.equals(FAKE_PNG)).toBe(true);

    // The stream replays what happened, without the key.
    const stream = await fetch(`${gantry.origin}/v1/predictions/${id}/stream`, {
      headers: { 'x-api-key': gantry.key },
      signal: AbortSignal.timeout(3_000),
    });
    expect(stream.status).toBe(200);
    const events = await stream.text();
    responseBodies.push(events);
    expect(events).toContain('done');
    expect(events).not.toContain(KEY);

    const webhookLog = await call('GET', `/v1/predictions/${id}/webhooks`);
    expect(webhookLog.status).toBe(200);
  });

  it('keeps the key out of the stored prediction while it runs (sealed, not in the clear)', async () => {
    // maxHoldMs: the create answers at once (Gantry asks `Prefer: wait=5`), so the run is seen processing.
    fake.setBehavior({ processingMs: 1_500, maxHoldMs: 50, output: { kind: 'raw', value: [PNG_DATA_URI] } });
    const created = await create({
      model: 'partner/model',
      input: { prompt: 'slow', replicate_api_key: KEY },
    });
    const id = String(created.id);
    await waitFor(id, (p) => p.status === 'processing');
    const rows = gantry.store.handle.prepare('SELECT * FROM predictions WHERE id = ?').all(id) as Json[];
    expect(rows).toHaveLength(1);
    const raw = JSON.stringify(rows);
    expect(raw).not.toContain(KEY);
    const record = JSON.parse(String(rows[0]?.record)) as Json;
    expect(record.input).toEqual({ prompt: 'slow' });
    expect(String(record.sealedSecrets)).toMatch(/^v1\./);
    const done = await waitFor(id);
    expect(done.status).toBe('succeeded');
    const after = JSON.parse(
      String(
        (gantry.store.handle.prepare('SELECT record FROM predictions WHERE id = ?').get(id) as Json).record,
      ),
    ) as Json;
    // Once terminal nothing needs the key any more: the sealed copy is gone too.
    expect(after.sealedSecrets).toBeNull();
  });

  it('downloads partner file outputs with the key (delivery URLs need it) into Gantry storage', async () => {
    // The fake's default output: one file URL on its own origin, served only with the creator's token.
    const created = await create({
      model: 'partner/model',
      input: { prompt: 'files', replicate_api_key: KEY },
    });
    const done = await waitFor(String(created.id));
    // A failed download is no reason to run (and bill the caller for) the model again.
    expect.soft(fake.predictions.length, 'partner predictions created for one Gantry prediction').toBe(1);
    // BUG: "Could not download output 0: maxRedirections is not supported, use the redirect interceptor"
    expect(done.error).toBeNull();
    expect(done.status).toBe('succeeded');
    const download = fake.requests.find((r) => r.path.startsWith('/delivery/'));
    expect(download?.headers.authorization).toBe(`Bearer ${KEY}`);
    const [url] = done.output as string[];
    expect(String(url).startsWith(`${gantry.origin}/v1/files/`)).toBe(true);
    const file = Buffer.from(await (await fetch(String(url))).arrayBuffer());
    expect(file.equals(FAKE_PNG)).toBe(true);
  });

  it('scrubs the key from partner logs and error text that echo it', async () => {
    fake.setBehavior({
      logs: [`authenticating with ${KEY}\n`, 'loading weights\n'],
      fail: `token ${KEY} has no access to this model`,
    });
    const created = await create({
      model: 'partner/model',
      input: { prompt: 'echo', replicate_api_key: KEY },
    });
    const done = await waitFor(String(created.id));
    expect(done.status).toBe('failed');
    expect(String(done.error)).toContain('has no access to this model');
    expect(String(done.error)).not.toContain(KEY);
    expect(String(done.logs)).toContain('loading weights');
    expect(String(done.logs)).not.toContain(KEY);
  });

  it('fails with a clear error, without the key, when the partner rejects the key', async () => {
    const created = await create({
      model: 'partner/model',
      input: { prompt: 'a lighthouse', replicate_api_key: WRONG_KEY },
    });
    expect((created.input as Json).replicate_api_key).toBe(REDACTED);
    const done = await waitFor(String(created.id));
    expect(done.status).toBe('failed');
    expect(String(done.error)).toMatch(/rejected the API key/i);
    expect(String(done.error)).toContain('401');
    expect(String(done.error)).not.toContain(WRONG_KEY);
    // It was tried with that key, once: a rejected key is not retried.
    expect(bearerTokens()).toEqual([WRONG_KEY]);
    expect(fake.predictions).toHaveLength(0);
  });

  it('refuses or fails with a clear error when the key is missing', async () => {
    const res = await call('POST', '/v1/predictions', {
      model: 'partner/model',
      input: { prompt: 'a lighthouse' },
    });
    if (res.status === 400) {
      const error = res.body.error as Json;
      expect(String(error.message)).toContain('replicate_api_key');
    } else {
      expect(res.status, res.text).toBe(200);
      const done = await waitFor(String(res.body.id));
      expect(done.status).toBe('failed');
      expect(String(done.error)).toContain('replicate_api_key');
      expect(String(done.error)).toMatch(/required/);
    }
    // The partner was never called without a key.
    expect(fake.requests).toHaveLength(0);
  });

  it('keeps the key out of the 400 INVALID_INPUT answer of an input that fails its schema', async () => {
    const wrongType = await call('POST', '/v1/predictions', {
      model: 'partner/model',
      input: { prompt: 42, replicate_api_key: KEY },
    });
    expect(wrongType.status).toBe(400);
    expect((wrongType.body.error as Json).error_id).toBe('INVALID_INPUT');
    expect(wrongType.text).not.toContain(KEY);
    // The key in a field the model does not have is refused by name, not echoed.
    const unknown = await call('POST', '/v1/predictions', {
      model: 'partner/model',
      input: { prompt: 'x', partner_key: KEY },
    });
    expect(unknown.status).toBe(400);
    expect(unknown.text).toContain('partner_key');
    expect(unknown.text).not.toContain(KEY);
    expect(fake.requests).toHaveLength(0);
  });

  it('cancels a running partner prediction on the partner, with the caller key', async () => {
    fake.setBehavior({ processingMs: 5_000, maxHoldMs: 50 });
    const created = await create({
      model: 'partner/model',
      input: { prompt: 'long', replicate_api_key: KEY },
    });
    const id = String(created.id);
    await waitFor(id, (p) => p.status === 'processing');
    const res = await call('POST', `/v1/predictions/${id}/cancel`);
    expect(res.status).toBe(200);
    expect(res.body.status).toBe('canceled');
    const until = Date.now() + 3_000;
    while (fake.predictions[0]?.cancelRequests === 0 && Date.now() < until) await sleep(10);
    expect(fake.predictions[0]?.cancelRequests).toBeGreaterThanOrEqual(1);
    expect(fake.predictions[0]?.canceledBy).toBe('cancel');
    const cancelCall = fake.requests.find((r) => r.path.endsWith('/cancel'));
    expect(cancelCall?.headers.authorization).toBe(`Bearer ${KEY}`);
    expect((await get(id)).status).toBe('canceled');
  });

  it('never lets the key appear in a response body, a webhook, the database or the logs', async () => {
    // Let the last deliveries and log lines land.
    await sleep(300);
    expect(responseBodies.length).toBeGreaterThan(10);
    for (const body of responseBodies) {
      expect(body).not.toContain(KEY);
      expect(body).not.toContain(WRONG_KEY);
    }
    // Webhooks of this suite's predictions (the receiver is reset per test: look at the delivery log).
    const webhookRows = gantry.store.handle.prepare('SELECT * FROM webhook_deliveries').all();
    expect(webhookRows.length).toBeGreaterThan(0);

    const predictions = gantry.store.handle.prepare('SELECT * FROM predictions').all();
    expect(predictions.length).toBeGreaterThanOrEqual(6);
    expect(JSON.stringify(predictions)).not.toContain(KEY);
    expect(JSON.stringify(predictions)).not.toContain(WRONG_KEY);
    const everything = wholeDatabase();
    expect(everything).not.toContain(KEY);
    expect(everything).not.toContain(WRONG_KEY);

    // The logs did record the traffic...
    const logs = logLines.join('\n');
    expect(logs).toContain('/v1/predictions');
    expect(logLines.some((l) => l.includes('"level":10') || l.includes('"level":20'))).toBeDefined();
    // ...but never the key.
    expect(logs).not.toContain(KEY);
    expect(logs).not.toContain(WRONG_KEY);
  });
});
