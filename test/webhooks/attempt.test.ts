import { createServer } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { deliverOnce, parseRetryAfter, verdictForStatus } from '../../src/webhooks/attempt.js';
import { generateWebhookSecret, signWebhook } from '../../src/webhooks/sign.js';
import { createGuardedAgent } from '../../src/webhooks/ssrf.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

const secret = generateWebhookSecret();
const body = JSON.stringify({ id: 'p1', status: 'succeeded', webhook_event_type: 'prediction.succeeded' });
// The receiver lives on 127.0.0.1, so these deliveries are made with private targets allowed.
const agent = createGuardedAgent({ allowPrivate: true });
let receiver: WebhookReceiver;

beforeAll(async () => {
  receiver = await startWebhookReceiver({ secret });
});
afterAll(async () => {
  await receiver.close();
  await agent.close();
});
beforeEach(() => receiver.reset());

function send(
  overrides: { timeoutMs?: number; headers?: Record<string, string>; signal?: AbortSignal } = {},
) {
  const headers = {
    ...signWebhook({ secret, id: 'msg_p1_succeeded', timestamp: Math.floor(Date.now() / 1000), body }),
    ...overrides.headers,
  };
  return deliverOnce({
    url: receiver.url,
    body,
    headers,
    timeoutMs: overrides.timeoutMs ?? 2000,
    dispatcher: agent,
    signal: overrides.signal,
  });
}

describe('deliverOnce', () => {
  it('delivers a signed JSON POST that the receiver can verify', async () => {
    const result = await send({ headers: { 'X-Gantry-Token': 'tok' } });
    expect(result).toEqual({ outcome: 'delivered', status: 200, ms: expect.any(Number) });
    const [request] = await receiver.waitFor(1);
    expect(request).toMatchObject({
      method: 'POST',
      path: '/webhook',
      rawBody: body,
      event: 'prediction.succeeded',
      signatureValid: true,
      gantrySignatureValid: true,
    });
    expect(request?.headers['content-type']).toBe('application/json');
    expect(request?.headers['x-gantry-token']).toBe('tok');
    expect(request?.headers['user-agent']).toMatch(/^Gantry-Webhooks/);
  });

  it('always sends application/json, whatever the caller headers say', async () => {
    await send({ headers: { 'Content-Type': 'text/plain' } });
    const [request] = await receiver.waitFor(1);
    expect(request?.headers['content-type']).toBe('application/json');
  });

  it.each([201, 202, 204, 299])('treats %i as delivered', async (status) => {
    receiver.nextResponses({ status });
    expect(await send()).toMatchObject({ outcome: 'delivered', status });
  });

  it.each([500, 502, 503, 504, 408, 425, 429])('retries after %i', async (status) => {
    receiver.nextResponses({ status });
    const result = await send();
    expect(result).toMatchObject({ outcome: 'retry', status });
    expect(result).not.toHaveProperty('retryAfterMs');
  });

  it('honours Retry-After in seconds', async () => {
    receiver.nextResponses({ status: 503, retryAfter: 7 });
    expect(await send()).toMatchObject({ outcome: 'retry', status: 503, retryAfterMs: 7000 });
  });

  it('honours Retry-After as an HTTP date', async () => {
    receiver.nextResponses({ status: 429, retryAfter: new Date(Date.now() + 60_000).toUTCString() });
    const result = await send();
    expect(result.outcome === 'retry' && result.retryAfterMs).toBeGreaterThan(55_000);
    expect(result.outcome === 'retry' && result.retryAfterMs).toBeLessThanOrEqual(60_000);
  });

  it.each([400, 401, 403, 404, 410, 422])('gives up on %i', async (status) => {
    receiver.nextResponses({ status });
    expect(await send()).toEqual({ outcome: 'rejected', status, ms: expect.any(Number) });
  });

  it('does not follow redirects (they could lead past the SSRF guard)', async () => {
    receiver.nextResponses({ status: 301, headers: { location: 'http://169.254.169.254/' } });
    expect(await send()).toMatchObject({ outcome: 'rejected', status: 301 });
    expect(receiver.requests).toHaveLength(1);
  });

  it('retries a receiver that never answers, within the timeout', async () => {
    receiver.nextResponses('hang');
    const result = await send({ timeoutMs: 300 });
    expect(result).toMatchObject({ outcome: 'retry', error: 'timed out after 300 ms' });
    expect(result.ms).toBeGreaterThanOrEqual(250);
    expect(result.ms).toBeLessThan(2000);
  });

  it('retries when the receiver closes the connection without answering', async () => {
    receiver.nextResponses('close');
    const result = await send();
    expect(result).toMatchObject({ outcome: 'retry', error: expect.any(String) });
    expect(result).not.toHaveProperty('status');
  });

  it('retries when nothing listens', async () => {
    const port = await freePort();
    const result = await deliverOnce({
      url: `http://127.0.0.1:${port}/`,
      body,
      headers: {},
      timeoutMs: 2000,
      dispatcher: agent,
    });
    expect(result).toMatchObject({ outcome: 'retry', error: expect.stringContaining('ECONNREFUSED') });
  });

  it('decides on the status without reading a huge answer in full', async () => {
    receiver.nextResponses({ status: 200, body: 'x'.repeat(5 * 1024 * 1024) });
    expect(await send()).toMatchObject({ outcome: 'delivered', status: 200 });
    // The connection was dropped mid-body; the next delivery still works.
    expect(await send()).toMatchObject({ outcome: 'delivered' });
  });

  it('rejects headers that cannot be sent instead of throwing, without echoing their value', async () => {
    const result = await send({ headers: { 'x-token': 'a\r\nb' } });
    expect(result).toMatchObject({ outcome: 'rejected', error: expect.stringContaining('x-token') });
    expect(result.outcome === 'rejected' && result.error).not.toContain('a\r\nb');
  });

  it('stops early when the caller aborts (a retry, not a failure)', async () => {
    receiver.nextResponses('hang');
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    const result = await send({ signal: controller.signal, timeoutMs: 5000 });
    expect(result.outcome).toBe('retry');
    expect(result.ms).toBeLessThan(2000);
  });
});

describe('verdictForStatus', () => {
  it('classifies without a network', () => {
    expect(verdictForStatus(200, undefined, 3)).toEqual({ outcome: 'delivered', status: 200, ms: 3 });
    expect(verdictForStatus(503, ['2', '9'], 3)).toEqual({
      outcome: 'retry',
      status: 503,
      retryAfterMs: 2000,
      ms: 3,
    });
    expect(verdictForStatus(302, undefined, 3)).toEqual({ outcome: 'rejected', status: 302, ms: 3 });
  });
});

describe('parseRetryAfter', () => {
  const now = Date.parse('2026-03-01T12:00:00Z');
  it('reads delta-seconds and HTTP dates', () => {
    expect(parseRetryAfter('120', now)).toBe(120_000);
    expect(parseRetryAfter(' 0 ', now)).toBe(0);
    expect(parseRetryAfter('Sun, 01 Mar 2026 12:00:30 GMT', now)).toBe(30_000);
  });
  it('treats a past date as now and junk as absent', () => {
    expect(parseRetryAfter('Sun, 01 Mar 2026 11:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('-5', now)).toBeUndefined();
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
  });
});

/** A port nothing listens on: bind one, note it, release it. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}
