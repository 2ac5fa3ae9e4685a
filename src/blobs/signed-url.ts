/**
 * Signed, expiring URLs for locally stored output files. The URL is the only credential (file routes
 * take no API key, so links work in <img>, <video> and download managers): an HMAC-SHA256 over the key
 * and the expiry, with a secret only Gantry knows.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { assertValidBlobKey } from './types.js';

/** The path under which the file routes serve blobs. */
export const FILES_PATH = '/v1/files';

/** HMAC keys shorter than this are guessable enough to forge links. */
export const MIN_SECRET_BYTES = 16;

/** Separates these MACs from any other use of the same secret. */
const DOMAIN = 'gantry-file-v1';
/** Epoch seconds as decimal digits; 12 digits reach far beyond any sane expiry. */
const EXPIRES = /^[0-9]{1,12}$/;
/** SHA-256 is 32 bytes: 43 base64url characters without padding. */
const SIGNATURE = /^[A-Za-z0-9_-]{43}$/;

export type BlobSecret = string | Buffer;

export function assertBlobSecret(secret: BlobSecret): void {
  const bytes = typeof secret === 'string' ? Buffer.byteLength(secret) : secret.length;
  if (bytes < MIN_SECRET_BYTES) {
    throw new Error(`The file URL signing secret must be at least ${MIN_SECRET_BYTES} bytes`);
  }
}

/** The base64url signature of `key` valid until `expires` (epoch seconds, as its decimal string). */
export function blobSignature(key: string, expires: string, secret: BlobSecret): string {
  return createHmac('sha256', secret).update(`${DOMAIN}\n${key}\n${expires}`).digest('base64url');
}

export interface SignBlobUrlOptions {
  /** Public origin (and optional path prefix) clients reach Gantry at, e.g. https://api.example.com */
  baseUrl: string;
  key: string;
  /** Epoch seconds after which the link stops working. */
  expiresAt: number;
  secret: BlobSecret;
}

/** `${baseUrl}/v1/files/${key}?expires=…&signature=…` */
export function signBlobUrl({ baseUrl, key, expiresAt, secret }: SignBlobUrlOptions): string {
  assertValidBlobKey(key);
  assertBlobSecret(secret);
  if (!Number.isSafeInteger(expiresAt) || expiresAt <= 0) {
    throw new Error(`expiresAt must be whole epoch seconds, got ${expiresAt}`);
  }
  const expires = String(expiresAt);
  const signature = blobSignature(key, expires, secret);
  const path = key.split('/').map(encodeURIComponent).join('/');
  return `${baseUrl.replace(/\/+$/, '')}${FILES_PATH}/${path}?expires=${expires}&signature=${signature}`;
}

export type BlobSignatureCheck =
  | { valid: true; expiresAt: number }
  /** `invalid`: missing, malformed or not ours (a tampered expiry too); `expired`: ours, but too old. */
  | { valid: false; reason: 'invalid' | 'expired' };

/**
 * Checks a link's query values for `key` at `nowSeconds` (epoch seconds). The link is valid while
 * `nowSeconds < expires`. The signature is checked first, so an edited expiry reads as invalid, never
 * as expired; the comparison is constant-time so timing cannot reveal a correct prefix.
 */
export function verifyBlobSignature(
  key: string,
  expires: string | number | undefined,
  signature: string | undefined,
  secret: BlobSecret,
  nowSeconds: number,
): BlobSignatureCheck {
  const expiresText = typeof expires === 'number' ? String(expires) : expires;
  if (expiresText === undefined || !EXPIRES.test(expiresText)) return { valid: false, reason: 'invalid' };
  if (signature === undefined || !SIGNATURE.test(signature)) return { valid: false, reason: 'invalid' };
  const expected = Buffer.from(blobSignature(key, expiresText, secret));
  const given = Buffer.from(signature);
  // Both are 43 ASCII characters here (checked above), so the lengths match as timingSafeEqual needs.
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return { valid: false, reason: 'invalid' };
  }
  const expiresAt = Number(expiresText);
  if (nowSeconds >= expiresAt) return { valid: false, reason: 'expired' };
  return { valid: true, expiresAt };
}
