import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { generateWebhookSecret, signWebhook } from '../../src/webhooks/sign.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

// The helper is shared with the end-to-end prediction tests, so its own behaviour is pinned here.
let receiver: WebhookReceiver | undefined;
afterEach(async () => {
  await receiver?.close();
  receiver = undefined;
});

async function post(url: string, body: string, headers: Record<string, string>) {
  const response = await request(url, { method: 'POST', body, headers });
  const text = await response.body.text();
  return { status: response.statusCode, headers: response.headers, text };
}

describe('webhook receiver helper', () => {
  it('records deliveries and checks both signatures with its secret', async () => {
    const secret = generateWebhookSecret();
    receiver = await startWebhookReceiver({ secret });
    const body = '{"webhook_event_type":"prediction.failed"}';
    const timestamp = Math.floor(Date.now() / 1000);
    await post(receiver.url, body, signWebhook({ secret, id: 'msg_1', timestamp, body }));
    await post(
      receiver.url,
      body,
      signWebhook({ secret: generateWebhookSecret(), id: 'msg_2', timestamp, body }),
    );

    const [good, forged] = await receiver.waitFor(2);
    expect(good).toMatchObject({
      event: 'prediction.failed',
      signatureValid: true,
      gantrySignatureValid: true,
    });
    expect(forged).toMatchObject({ signatureValid: false, gantrySignatureValid: false });
    expect(forged?.signatureError).toEqual(expect.any(String));
  });

  it('leaves signature fields undefined without a secret', async () => {
    receiver = await startWebhookReceiver();
    await post(receiver.url, '{}', {});
    const [request] = await receiver.waitFor(1);
    expect(request?.signatureValid).toBeUndefined();
    expect(request?.gantrySignatureValid).toBeUndefined();
  });

  it('answers queued replies in order, then the default', async () => {
    receiver = await startWebhookReceiver();
    receiver.nextResponses({ status: 500 }, { status: 429, retryAfter: 3 });
    const first = await post(receiver.url, '{}', {});
    const second = await post(receiver.url, '{}', {});
    const third = await post(receiver.url, '{}', {});
    expect([first.status, second.status, third.status]).toEqual([500, 429, 200]);
    expect(second.headers['retry-after']).toBe('3');

    receiver.setDefaultResponse({ status: 204, body: '' });
    expect((await post(receiver.url, '{}', {})).status).toBe(204);
  });

  it('can close the socket without answering', async () => {
    receiver = await startWebhookReceiver();
    receiver.nextResponses('close');
    await expect(post(receiver.url, '{}', {})).rejects.toThrow();
    expect(receiver.requests).toHaveLength(1);
  });

  it('waitFor fails with a clear message after its timeout', async () => {
    receiver = await startWebhookReceiver();
    await expect(receiver.waitFor(1, 50)).rejects.toThrow('webhook receiver got 0 requests, expected 1');
  });

  it('close() ends even with a delivery left hanging', async () => {
    receiver = await startWebhookReceiver();
    receiver.nextResponses('hang');
    const pending = post(receiver.url, '{}', {}).catch((err: unknown) => err);
    await receiver.waitFor(1);
    await receiver.close();
    receiver = undefined;
    expect(await pending).toBeInstanceOf(Error);
  });
});
