import type { Redis } from 'ioredis';
import {
  type CreditMovement,
  type CreditStore,
  checkDebit,
  checkDefaultBalance,
  checkGrant,
  type Debit,
  type DebitResult,
  type DefaultBalance,
  fromMicros,
  toMicros,
} from './credits.js';
import { LuaScript } from './redis-script.js';

export interface RedisCreditStoreOptions {
  defaultBalance: DefaultBalance;
  /**
   * Key prefix; default 'gantry:{credits}' (hash-tagged: every key of one script shares a Cluster slot).
   * Keys: `<prefix>:balances` (hash account → micro-credits), `<prefix>:debited:<record id>` (markers),
   * `<prefix>:ledger` (stream of grants). Grants are announced on the channel `<prefix>:granted`.
   */
  prefix?: string;
  /**
   * How long a debited record id is remembered, in seconds: it must outlive any retry of the same
   * debit (the batcher retries within seconds to minutes). ~100 bytes per request. Default 3600.
   */
  dedupeTtlSeconds?: number;
  /**
   * Serve balance() from memory for this long after a read (or a debit/grant by this instance), so a
   * request costs no extra Redis round trip: another instance's debits show up at most this late.
   * Balances may go negative anyway, so a second of staleness only lets a few more requests in.
   * Default 0 (always read).
   */
  balanceCacheMs?: number;
}

const UNLIMITED = 'unlimited';
/** Ledger entries read per XREVRANGE while picking one account's grants. */
const LEDGER_PAGE = 500;
/** Most ledger entries one movements() call reads (the stream holds every account's grants). */
const LEDGER_SCAN_MAX = 100_000;

/*
 * KEYS[1] balances hash, KEYS[1 + i] the marker of debit i.
 * ARGV[1] ttl, ARGV[2] default micros or 'unlimited', then per debit: account, micros.
 * Replies [applied, balance] per debit; balance is 'unlimited' for an account without a row under an
 * unlimited default. The balance moves before the marker is set, so an error half-way never marks a
 * debit that did not happen.
 */
const DEBIT_SCRIPT = new LuaScript(`
local ttl = ARGV[1]
local default = ARGV[2]
local out = {}
for i = 2, #KEYS do
  local account = ARGV[2 * i - 1]
  local micros = tonumber(ARGV[2 * i])
  local applied = 0
  local balance
  if redis.call('EXISTS', KEYS[i]) == 0 then
    applied = 1
    if redis.call('HEXISTS', KEYS[1], account) == 1 then
      balance = redis.call('HINCRBY', KEYS[1], account, -micros)
    elseif default == 'unlimited' then
      balance = 'unlimited'
    else
      balance = redis.call('HINCRBY', KEYS[1], account, tonumber(default) - micros)
    end
    redis.call('SET', KEYS[i], account, 'EX', ttl)
  else
    balance = redis.call('HGET', KEYS[1], account) or default
  end
  out[#out + 1] = applied
  out[#out + 1] = balance
end
return out
`);

/*
 * KEYS[1] balances hash, KEYS[2] ledger stream.
 * ARGV: account, micros, default micros or 'unlimited', note, time. Replies the new balance.
 */
const GRANT_SCRIPT = new LuaScript(`
local seed = ARGV[2]
if ARGV[3] ~= 'unlimited' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  seed = tonumber(ARGV[3]) + tonumber(ARGV[2])
end
local balance = redis.call('HINCRBY', KEYS[1], ARGV[1], seed)
redis.call('XADD', KEYS[2], '*', 'account_id', ARGV[1], 'kind', 'grant', 'amount_micros', ARGV[2],
  'balance_micros', balance, 'note', ARGV[4], 'time', ARGV[5])
return balance
`);

/**
 * Credits in Redis for the distributed mode: one hash of balances in integer micro-credits, and a
 * marker key per debited record id; check, move and mark happen in one Lua call, so debits from many
 * instances sum exactly and a retried debit is a no-op.
 */
export class RedisCreditStore implements CreditStore {
  /** The hash of balances (micro-credits), for a limiter script that wants to read it in its own call. */
  readonly balancesKey: string;
  /** The pub/sub channel each grant is announced on (the account id), so instances forget that balance. */
  readonly grantsChannel: string;
  private readonly prefix: string;
  private readonly defaultArg: string;
  private readonly ttl: number;
  private readonly cacheMs: number;
  private readonly cached = new Map<string, { balance: number; until: number }>();

  /** The client is the caller's: close() leaves it open. */
  constructor(
    private readonly redis: Redis,
    options: RedisCreditStoreOptions,
  ) {
    checkDefaultBalance(options.defaultBalance);
    this.prefix = options.prefix ?? 'gantry:{credits}';
    this.balancesKey = `${this.prefix}:balances`;
    this.grantsChannel = `${this.prefix}:granted`;
    this.defaultArg =
      options.defaultBalance === UNLIMITED ? UNLIMITED : String(toMicros(options.defaultBalance));
    this.ttl = options.dedupeTtlSeconds ?? 3600;
    this.cacheMs = options.balanceCacheMs ?? 0;
  }

  /** A number straight from memory when cached (no await needed), else a promise. */
  balance(accountId: string): number | Promise<number> {
    const hit = this.cached.get(accountId);
    if (hit && hit.until > Date.now()) return hit.balance;
    return this.readBalance(accountId);
  }

  private async readBalance(accountId: string): Promise<number> {
    const micros = await this.redis.hget(this.balancesKey, accountId);
    return this.remember(accountId, toCredits(micros ?? this.defaultArg));
  }

  private remember(accountId: string, balance: number): number {
    if (this.cacheMs > 0) this.cached.set(accountId, { balance, until: Date.now() + this.cacheMs });
    return balance;
  }

  async debit(accountId: string, credits: number, recordId: string): Promise<DebitResult> {
    const [result] = await this.debitMany([{ accountId, credits, recordId }]);
    return result as DebitResult;
  }

  async debitMany(debits: readonly Debit[]): Promise<DebitResult[]> {
    if (debits.length === 0) return [];
    const keys = [this.balancesKey];
    const args: Array<string | number> = [this.ttl, this.defaultArg];
    for (const d of debits) {
      checkDebit(d);
      keys.push(`${this.prefix}:debited:${d.recordId}`);
      args.push(d.accountId, toMicros(d.credits));
    }
    const reply = await DEBIT_SCRIPT.run(this.redis, keys, args);
    if (!Array.isArray(reply) || reply.length !== debits.length * 2) {
      throw new Error('unexpected reply from the debit script');
    }
    const results: DebitResult[] = [];
    for (let i = 0; i < reply.length; i += 2) {
      const debit = debits[i / 2] as Debit;
      const balance = this.remember(debit.accountId, toCredits(reply[i + 1]));
      results.push({ applied: Number(reply[i]) === 1, balance });
    }
    return results;
  }

  async grant(accountId: string, credits: number, note: string): Promise<number> {
    const micros = checkGrant(accountId, credits);
    const reply = await GRANT_SCRIPT.run(
      this.redis,
      [this.balancesKey, `${this.prefix}:ledger`],
      [accountId, micros, this.defaultArg, note, new Date().toISOString()],
    );
    // The grant is applied: failing now would make the operator run it again and grant twice. Without
    // the announcement, other instances see the new balance when their cached one expires (balanceCacheMs).
    await this.redis.publish(this.grantsChannel, accountId).catch(() => undefined);
    return this.remember(accountId, toCredits(reply));
  }

  async movements(accountId: string, limit: number): Promise<CreditMovement[]> {
    const found: CreditMovement[] = [];
    let end = '+';
    for (let read = 0; read < LEDGER_SCAN_MAX; read += LEDGER_PAGE) {
      const page = await this.redis.xrevrange(`${this.prefix}:ledger`, end, '-', 'COUNT', LEDGER_PAGE);
      for (const [, list] of page) {
        const fields = new Map<string, string>();
        for (let i = 0; i + 1 < list.length; i += 2) fields.set(list[i] as string, list[i + 1] as string);
        if (fields.get('account_id') !== accountId) continue;
        const balance = fields.get('balance_micros');
        found.push({
          at: fields.get('time') ?? '',
          amount: fromMicros(Number(fields.get('amount_micros') ?? 0)),
          kind: fields.get('kind') === 'debit' ? 'debit' : 'grant',
          note: fields.get('note') || null,
          balanceAfter: balance === undefined ? null : fromMicros(Number(balance)),
        });
        if (found.length >= limit) return found;
      }
      if (page.length < LEDGER_PAGE) break;
      end = `(${(page[page.length - 1] as [string, string[]])[0]}`;
    }
    return found;
  }

  /** Drops a cached balance (another process granted credits), or every cached balance. */
  forget(accountId?: string): void {
    if (accountId === undefined) this.cached.clear();
    else this.cached.delete(accountId);
  }

  async close(): Promise<void> {}
}

function toCredits(value: unknown): number {
  if (value === UNLIMITED) return Number.POSITIVE_INFINITY;
  const micros = Number(value);
  if (!Number.isFinite(micros)) throw new Error(`unexpected balance from Redis: ${String(value)}`);
  return fromMicros(micros);
}
