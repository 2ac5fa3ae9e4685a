import { createHmac } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import {
  generateWebhookSecret,
  signWebhook,
  verifyGantrySignature,
  webhookMessageId,
  webhookSecretKey,
} from '../../src/webhooks/sign.js';

const now = (): number => Math.floor(Date.now() / 1000);
const body = JSON.stringify({ id: 'b6f1', status: 'succeeded', webhook_event_type: 'prediction.succeeded' });

describe('generateWebhookSecret', () => {
  it('is whsec_ + base64 of 32 random bytes, different every time', () => {
    const a = generateWebhookSecret();
    const b = generateWebhookSecret();
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]+={0,2}$/);
    expect(webhookSecretKey(a)).toHaveLength(32);
    expect(a).not.toBe(b);
  });
});

describe('signWebhook', () => {
  it('produces Standard Webhooks headers the official library verifies', () => {
    const secret = generateWebhookSecret();
    const headers = signWebhook({ secret, id: 'msg_abc', timestamp: now(), body });
    expect(headers['webhook-id']).toBe('msg_abc');
    expect(headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(new Webhook(secret).verify(body, { ...headers })).toEqual(JSON.parse(body));
  });

  it('matches the official library byte for byte', () => {
    const secret = generateWebhookSecret();
    const timestamp = now();
    const ours = signWebhook({ secret, id: 'msg_1', timestamp, body })['webhook-signature'];
    expect(ours).toBe(new Webhook(secret).sign('msg_1', new Date(timestamp * 1000), body));
  });

  it('reproduces the published test vector', () => {
    const headers = signWebhook({
      secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      timestamp: 1614265330,
      body: '{"test": 2432232314}',
    });
    expect(headers['webhook-signature']).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
  });

  it('fails verification with another secret, another body or a stale timestamp', () => {
    const secret = generateWebhookSecret();
    const headers = signWebhook({ secret, id: 'msg_abc', timestamp: now(), body });
    expect(() => new Webhook(generateWebhookSecret()).verify(body, { ...headers })).toThrow();
    expect(() => new Webhook(secret).verify(`${body} `, { ...headers })).toThrow();
    const stale = signWebhook({ secret, id: 'msg_abc', timestamp: now() - 3600, body });
    expect(() => new Webhook(secret).verify(body, { ...stale })).toThrow();
  });

  it('signs Gantry-Signature as t=<ts>,v1=<hex HMAC of "ts.body"> with the decoded key', () => {
    const secret = generateWebhookSecret();
    const timestamp = now();
    const headers = signWebhook({ secret, id: 'msg_abc', timestamp, body });
    const hex = createHmac('sha256', webhookSecretKey(secret)).update(`${timestamp}.${body}`).digest('hex');
    expect(headers['gantry-signature']).toBe(`t=${timestamp},v1=${hex}`);
    expect(verifyGantrySignature({ secret, header: headers['gantry-signature'], body })).toBe(true);
  });

  it('refuses a Gantry-Signature with another body, secret or a stale t', () => {
    const secret = generateWebhookSecret();
    const header = signWebhook({ secret, id: 'msg_abc', timestamp: now(), body })['gantry-signature'];
    expect(verifyGantrySignature({ secret, header, body: `${body} ` })).toBe(false);
    expect(verifyGantrySignature({ secret: generateWebhookSecret(), header, body })).toBe(false);
    expect(verifyGantrySignature({ secret, header, body, now: now() + 3600 })).toBe(false);
    expect(verifyGantrySignature({ secret, header: 'v1=00', body })).toBe(false);
  });

  it('refuses ids with a dot, fractional timestamps and malformed secrets, without echoing the secret', () => {
    const secret = generateWebhookSecret();
    expect(() => signWebhook({ secret, id: 'msg.1', timestamp: now(), body })).toThrow(/id/);
    expect(() => signWebhook({ secret, id: 'msg_1', timestamp: 1.5, body })).toThrow(/timestamp/);
    const bad = 'whsec_not base64!';
    expect(() => signWebhook({ secret: bad, id: 'msg_1', timestamp: now(), body })).toThrow(
      expect.objectContaining({ message: expect.not.stringContaining('base64!') }),
    );
  });
});

describe('webhookMessageId', () => {
  it('is stable per prediction and event, and safe to sign', () => {
    const id = webhookMessageId('0b9f3c6e-1d1e-4a5a-9d1c-2f1e7c0a9b11', 'prediction.succeeded');
    expect(id).toBe('msg_0b9f3c6e-1d1e-4a5a-9d1c-2f1e7c0a9b11_succeeded');
    expect(webhookMessageId('a.b', 'prediction.failed')).not.toContain('.');
  });
});
