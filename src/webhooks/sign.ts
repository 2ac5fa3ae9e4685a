/**
 * Webhook signing. Every delivery carries two signatures made with the same per-account secret:
 *
 * 1. Standard Webhooks v1 (https://www.standardwebhooks.com), so receivers can use the official
 *    libraries (`new Webhook(secret).verify(body, headers)`):
 *      webhook-id:        the message id; the same on every retry of one event, an idempotency key
 *      webhook-timestamp: integer Unix seconds of this attempt
 *      webhook-signature: `v1,<base64 HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")>`
 *    where `key` is the secret after `whsec_`, base64-decoded.
 *
 * 2. `Gantry-Signature` (the spec's `<service>-Signature` header), in the style of Stripe's:
 *      Gantry-Signature: t=<webhook-timestamp>,v1=<hex HMAC-SHA256(key, "<t>.<body>")>
 *    with the same decoded `key`. Receivers split on `,`, take `t` and every `v1`, recompute the HMAC
 *    over the raw body, compare in constant time and reject a `t` far from their clock.
 *
 * The body must be signed and sent byte for byte as the same string; receivers must verify the raw
 * body, not a re-serialised parse of it.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const WEBHOOK_ID_HEADER = 'webhook-id';
export const WEBHOOK_TIMESTAMP_HEADER = 'webhook-timestamp';
export const WEBHOOK_SIGNATURE_HEADER = 'webhook-signature';
export const GANTRY_SIGNATURE_HEADER = 'gantry-signature';

const SECRET_PREFIX = 'whsec_';
/** Standard Webhooks asks for at least 24 random bytes; 32 matches the HMAC-SHA256 block strength. */
const SECRET_BYTES = 32;

/** A type alias (not an interface) so it is assignable to `Record<string, string>` header maps. */
export type WebhookSignatureHeaders = {
  'webhook-id': string;
  'webhook-timestamp': string;
  'webhook-signature': string;
  'gantry-signature': string;
};

export interface SignWebhookInput {
  /** `whsec_<base64>` (the prefix is optional, as in the Standard Webhooks libraries). */
  secret: string;
  /** Message id: stable across retries of one event; must not contain `.` (it delimits the signed text). */
  id: string;
  /** Unix seconds of this attempt. */
  timestamp: number;
  /** The exact request body that will be sent. */
  body: string;
}

/** A new account webhook secret: `whsec_` + base64 of 32 random bytes. A secret: never log it. */
export function generateWebhookSecret(): string {
  return SECRET_PREFIX + randomBytes(SECRET_BYTES).toString('base64');
}

/** The HMAC key inside a `whsec_` secret. Throws (without echoing the secret) when it is not base64. */
export function webhookSecretKey(secret: string): Buffer {
  const encoded = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret;
  // Buffer.from(…, 'base64') silently skips junk, so check the alphabet first.
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) throw new Error('webhook secret is not whsec_<base64>');
  const key = Buffer.from(encoded, 'base64');
  if (key.length === 0) throw new Error('webhook secret is empty');
  return key;
}

/** Signs one delivery attempt; returns the four headers to send with `body`. */
export function signWebhook(input: SignWebhookInput): WebhookSignatureHeaders {
  const { id, timestamp, body } = input;
  if (id.length === 0 || id.includes('.')) throw new Error('webhook id must be non-empty and contain no "."');
  if (!Number.isSafeInteger(timestamp) || timestamp < 0) {
    throw new Error('webhook timestamp must be integer Unix seconds');
  }
  const key = webhookSecretKey(input.secret);
  const standard = hmac(key, `${id}.${timestamp}.${body}`).toString('base64');
  const gantry = hmac(key, `${timestamp}.${body}`).toString('hex');
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': `v1,${standard}`,
    'gantry-signature': `t=${timestamp},v1=${gantry}`,
  };
}

export interface VerifyGantrySignatureInput {
  secret: string;
  /** The `Gantry-Signature` header as received. */
  header: string;
  /** The raw body as received. */
  body: string;
  /** Largest accepted distance between `t` and now, in seconds (default 300, as Standard Webhooks). */
  toleranceSec?: number;
  /** Unix seconds; defaults to the clock. */
  now?: number;
}

/**
 * Checks a `Gantry-Signature` header: the reference for receivers that do not use a Standard
 * Webhooks library, and what the tests hold the format to.
 */
export function verifyGantrySignature(input: VerifyGantrySignatureInput): boolean {
  const { header, body, toleranceSec = 300, now = Math.floor(Date.now() / 1000) } = input;
  let timestamp: number | undefined;
  const candidates: string[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (name === 't' && /^\d+$/.test(value)) timestamp = Number(value);
    else if (name === 'v1') candidates.push(value);
  }
  if (timestamp === undefined || Math.abs(now - timestamp) > toleranceSec) return false;
  const expected = hmac(webhookSecretKey(input.secret), `${timestamp}.${body}`);
  return candidates.some((candidate) => {
    const given = Buffer.from(candidate, 'hex');
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}

/**
 * The message id for one event of one prediction. Deterministic on purpose: a delivery re-enqueued
 * after a restart carries the same `webhook-id`, so receivers can drop the duplicate.
 */
export function webhookMessageId(predictionId: string, event: string): string {
  const safe = (text: string): string => text.replace(/[^A-Za-z0-9_-]/g, '_');
  return `msg_${safe(predictionId)}_${safe(event.replace(/^prediction\./, ''))}`;
}

function hmac(key: Buffer, text: string): Buffer {
  return createHmac('sha256', key).update(text, 'utf8').digest();
}
