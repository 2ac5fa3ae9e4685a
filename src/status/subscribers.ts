/**
 * The status page's e-mail subscribers (README, "Status page" → "E-mail subscriptions"): one record per
 * address, pending until its confirmation link is used, then confirmed until unsubscribed.
 *
 * The address is kept (mails need it); the confirmation token is not, only its SHA-256, so a copy of the
 * store cannot confirm anyone. Unsubscribe links carry no stored token at all: they are an HMAC of the
 * subscriber's id under the instance's secret key (subscriptions.ts).
 */
import { createHash, randomBytes } from 'node:crypto';

export interface Subscriber {
  /** Random, never derived from the address; unsubscribe links name it. */
  id: string;
  /** Normalised (trimmed, lower case). */
  email: string;
  confirmed: boolean;
  createdAt: number;
  confirmedAt: number | null;
  /** Pending only: when the confirmation link stops working and the record goes away. */
  pendingUntil: number | null;
}

/** What a subscribe request did to the store (the HTTP answer is the same either way). */
export type PendingResult = { id: string; state: 'pending' } | { id: string; state: 'confirmed' };

export interface SubscriberStore {
  /**
   * A new pending record for the address, or a fresh confirmation token (hash) and expiry for a pending
   * one; a confirmed address is left as it is.
   */
  upsertPending(
    email: string,
    confirmHash: string,
    pendingUntil: number,
    now: number,
  ): Promise<PendingResult>;
  /** The pending subscriber whose confirmation token hashes to `confirmHash`, if not expired. Reads only. */
  findPending(confirmHash: string, now: number): Promise<Subscriber | undefined>;
  /** Confirms the pending subscriber of that token (which stops working); undefined if none or expired. */
  confirm(confirmHash: string, now: number): Promise<Subscriber | undefined>;
  get(id: string): Promise<Subscriber | undefined>;
  /** true when there was a record to remove. */
  remove(id: string): Promise<boolean>;
  /** Every confirmed subscriber. */
  listConfirmed(): Promise<Subscriber[]>;
  /** Drops pending records past their expiry (Redis expires them by itself). */
  purgeExpired(now: number): Promise<void>;
  /** Counts one attempt in the fixed window of `windowMs` for `bucket`; returns the count so far. */
  hit(bucket: string, windowMs: number, now: number): Promise<number>;
  close(): Promise<void>;
}

/** A new random token (for a link) and the hash that is stored in its place. */
export function newToken(): { token: string; hash: string } {
  const token = randomBytes(32).toString('base64url');
  return { token, hash: hashToken(token) };
}

export function hashToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export function newSubscriberId(): string {
  return randomBytes(12).toString('base64url');
}

const MAX_EMAIL_LENGTH = 254;
// One address, nothing a header could be built from: no spaces, commas, angle brackets, quotes or
// control characters; a dot in the domain. Deliberately narrower than RFC 5322.
const EMAIL =
  /^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$/;

/** The address as stored and compared (trimmed, lower case), or undefined when it is not one we mail. */
export function normaliseEmail(input: unknown): string | undefined {
  if (typeof input !== 'string') return undefined;
  const email = input.trim().toLowerCase();
  if (email.length > MAX_EMAIL_LENGTH || !EMAIL.test(email)) return undefined;
  return email;
}

/** `a***@example.com`: enough to tell log lines apart, not enough to read the address. */
export function maskEmail(email: string): string {
  const at = email.lastIndexOf('@');
  if (at < 1) return '***';
  return `${email[0]}***${email.slice(at)}`;
}
