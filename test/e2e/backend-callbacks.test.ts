/**
 * POST /internal/backends/{provider}/{id}?token=…, where Cog servers post their webhooks: the token is
 * checked before the body is read, and bodies are capped at server.callback_body_limit_bytes.
 */
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeCog, startFakeCog } from '../helpers/fake-cog.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { restCall } from '../helpers/rest.js';
import { until, waitFor } from '../helpers/wait.js';

describe('backend callbacks', () => {
  let cog: FakeCog;
  let gantry: TestGantry;
  beforeAll(async () => {
    cog = await startFakeCog({ throttleMs: 0 });
    gantry = await startGantry(`
server: { callback_body_limit_bytes: 4096 }
providers:
  cog-async: { kind: cog, base_url: "${cog.origin}", async: true }
tiers:
  default: {}
models:
  - namespace: acme/flux
    name: acme/flux
    type: image
    vendor: { name: Acme, slug: acme }
    serves: [predictions]
    routes: [{ provider: cog-async }]
`);
  });
  afterAll(async () => {
    await gantry?.close();
    await cog?.close();
  });

  it('answers 404 to a wrong token as soon as the headers arrive, without waiting for the body', async () => {
    const socket = connect(Number(new URL(gantry.origin).port), '127.0.0.1');
    let answer = '';
    socket.on('data', (chunk: Buffer) => {
      answer += chunk.toString();
    });
    socket.on('error', () => {});
    // Announces 256 MiB and sends a few bytes of it.
    socket.write(
      'POST /internal/backends/cog-async/00000000-0000-4000-8000-000000000000?token=forged HTTP/1.1\r\n' +
        'host: x\r\ncontent-type: application/json\r\ncontent-length: 268435456\r\n\r\n{"status":',
    );
    await until('the answer', () => answer.includes('\r\n\r\n{'), 2_000);
    expect(answer).toMatch(/^HTTP\/1\.1 404/);
    expect(answer.toLowerCase()).toContain('connection: close');
    expect(answer).toContain('"error_id":"NOT_FOUND"');
    socket.destroy();
  });

  it('refuses a callback with a valid token over callback_body_limit_bytes with 413; one within it is taken', async () => {
    cog.setBehavior({ stepMs: 300 });
    const created = await restCall<{ id: string }>(gantry.origin, 'POST', '/v1/predictions', {
      key: gantry.key,
      body: { model: 'acme/flux', input: { prompt: 'a fox' } },
    });
    const id = created.body.id;
    const hook = await waitFor('the webhook URL Gantry gave the Cog server', () => {
      const put = cog.requests.find((r) => r.method === 'PUT' && r.path.endsWith(id));
      return typeof put?.body?.webhook === 'string' ? put.body.webhook : undefined;
    });
    const big = await restCall<Record<string, unknown>>(
      gantry.origin,
      'POST',
      new URL(hook).pathname + new URL(hook).search,
      {
        key: null,
        body: { id, status: 'processing', logs: 'x'.repeat(8_000) },
      },
    );
    expect(big.status, big.text).toBe(413);
    expect(big.body).toMatchObject({
      status: false,
      error: { error_id: 'PAYLOAD_TOO_LARGE', http_status: 413 },
    });
    const small = await restCall<Record<string, unknown>>(
      gantry.origin,
      'POST',
      new URL(hook).pathname + new URL(hook).search,
      {
        key: null,
        body: { id, status: 'processing', logs: 'a line\n' },
      },
    );
    expect(small.status, small.text).toBe(200);
    // Not left running for the shutdown to wait on.
    await restCall(gantry.origin, 'POST', `/v1/predictions/${id}/cancel`, { key: gantry.key });
  });
});
