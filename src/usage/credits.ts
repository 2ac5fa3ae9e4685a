/**
 * Credit balances per account. Amounts are credits (numbers) at the API and integer micro-credits
 * (1e-6) in storage, so concurrent debits sum exactly in SQLite and in Redis (HINCRBY, not floats).
 *
 * Balances may go negative: a request is admitted on an estimate and debited its real cost afterwards.
 * The gateway refuses new requests with 402 PAYMENT_REQUIRED when the balance is negative, and with
 * 402 INSUFFICIENT_CREDITS when the estimate exceeds it.
 *
 * `defaultBalance` says what an account without a balance row has:
 * - a number (e.g. 0, or trial credits): its balance is that number; its first debit or grant creates
 *   the row starting from it;
 * - 'unlimited': balance() is Infinity, debits are recorded (idempotency, ledger) but do not create a
 *   row; the first grant opens a metered balance that starts at the granted amount.
 */

export type DefaultBalance = number | 'unlimited';

export interface DebitResult {
  /** false when this record id had been debited before (the balance is unchanged). */
  applied: boolean;
  /** The balance after the debit; Infinity for an unlimited account. */
  balance: number;
}

export interface Debit {
  accountId: string;
  credits: number;
  /** The usage record id: a second debit with it is a no-op. */
  recordId: string;
}

/** One movement of an account's credits, as the admin API lists them (newest first). */
export interface CreditMovement {
  /** ISO 8601. */
  at: string;
  /** Signed: debits are negative. */
  amount: number;
  kind: 'grant' | 'debit';
  note: string | null;
  /** The balance right after it, when the store keeps it (Redis grants); else null. */
  balanceAfter: number | null;
}

export interface CreditStore {
  /** On the request path: one indexed read (SQLite) or one HGET (Redis). Infinity when unlimited. */
  balance(accountId: string): number | Promise<number>;
  /** Idempotent by recordId. */
  debit(accountId: string, credits: number, recordId: string): DebitResult | Promise<DebitResult>;
  /** Many debits in one transaction / one script call; results in the same order. */
  debitMany(debits: readonly Debit[]): DebitResult[] | Promise<DebitResult[]>;
  /** Adds credits (negative for a correction) and returns the new balance. Not idempotent. */
  grant(accountId: string, credits: number, note: string): number | Promise<number>;
  /**
   * The account's latest movements, newest first: every grant and debit in SQLite; grants only on Redis,
   * whose debits leave no per-request record there (the usage stream has them).
   */
  movements(accountId: string, limit: number): CreditMovement[] | Promise<CreditMovement[]>;
  close(): void | Promise<void>;
}

/**
 * The admission rule: a negative balance refuses everything (402 PAYMENT_REQUIRED); otherwise a request
 * whose estimated credits exceed the balance is refused (402 INSUFFICIENT_CREDITS). Unlimited is Infinity.
 */
export function creditRefusal(
  balance: number,
  estimate: number,
): 'PAYMENT_REQUIRED' | 'INSUFFICIENT_CREDITS' | undefined {
  if (balance < 0) return 'PAYMENT_REQUIRED';
  if (estimate > balance) return 'INSUFFICIENT_CREDITS';
  return undefined;
}

export const MICROS_PER_CREDIT = 1_000_000;

export function toMicros(credits: number): number {
  if (!Number.isFinite(credits)) throw new RangeError(`credits must be a finite number, got ${credits}`);
  const micros = Math.round(credits * MICROS_PER_CREDIT);
  if (!Number.isSafeInteger(micros)) throw new RangeError(`credits out of range: ${credits}`);
  return micros;
}

export function fromMicros(micros: number): number {
  return micros / MICROS_PER_CREDIT;
}

/** A grant's arguments checked as every store checks them; returns the credits in micros. */
export function checkGrant(accountId: string, credits: number): number {
  if (typeof accountId !== 'string' || accountId.length === 0) throw new RangeError('accountId is required');
  return toMicros(credits);
}

export function checkDebit(d: Debit): void {
  if (typeof d.accountId !== 'string' || d.accountId.length === 0)
    throw new RangeError('accountId is required');
  if (typeof d.recordId !== 'string' || d.recordId.length === 0) throw new RangeError('recordId is required');
  if (!(d.credits >= 0)) throw new RangeError(`a debit must be >= 0 credits, got ${d.credits}`);
}

export function checkDefaultBalance(value: DefaultBalance): void {
  if (value !== 'unlimited') toMicros(value);
}
