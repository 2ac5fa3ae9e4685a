import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { LuaScript } from '../usage/redis-script.js';
import { newSubscriberId, type PendingResult, type Subscriber, type SubscriberStore } from './subscribers.js';

/** One hash tag: every key of the subscribers sits in one slot, so the scripts may touch several. */
export const DEFAULT_SUBSCRIBERS_PREFIX = 'gantry:{status-subs}:';

// A subscriber is the hash `sub:<id>`; `email:<sha256 of address>` and `confirm:<token hash>` point to
// its id; `confirmed` is the set of confirmed ids. Pending records and their pointers expire on their own.
const UPSERT = new LuaScript(`
local P = ARGV[1]
local id = redis.call('GET', KEYS[1])
if id then
  local rec = P .. 'sub:' .. id
  local confirmed = redis.call('HGET', rec, 'confirmed')
  if confirmed == '1' then return {id, 'confirmed'} end
  if confirmed then
    local old = redis.call('HGET', rec, 'confirm_hash')
    if old then redis.call('DEL', P .. 'confirm:' .. old) end
    redis.call('HSET', rec, 'confirm_hash', ARGV[4], 'pending_until', ARGV[5])
    redis.call('PEXPIREAT', rec, ARGV[5])
    redis.call('PEXPIREAT', KEYS[1], ARGV[5])
    redis.call('SET', P .. 'confirm:' .. ARGV[4], id, 'PXAT', ARGV[5])
    return {id, 'pending'}
  end
end
id = ARGV[2]
local rec = P .. 'sub:' .. id
redis.call('HSET', rec, 'email', ARGV[3], 'email_key', ARGV[7], 'confirmed', '0', 'created_at', ARGV[6],
  'confirm_hash', ARGV[4], 'pending_until', ARGV[5])
redis.call('PEXPIREAT', rec, ARGV[5])
redis.call('SET', KEYS[1], id, 'PXAT', ARGV[5])
redis.call('SET', P .. 'confirm:' .. ARGV[4], id, 'PXAT', ARGV[5])
return {id, 'pending'}
`);

const CONFIRM = new LuaScript(`
local P = ARGV[1]
local id = redis.call('GET', KEYS[1])
if not id then return false end
local rec = P .. 'sub:' .. id
local f = redis.call('HMGET', rec, 'confirmed', 'confirm_hash', 'pending_until', 'email_key')
if f[1] ~= '0' or f[2] ~= ARGV[3] or tonumber(f[3]) <= tonumber(ARGV[2]) then return false end
redis.call('DEL', KEYS[1])
redis.call('HSET', rec, 'confirmed', '1', 'confirmed_at', ARGV[2])
redis.call('HDEL', rec, 'confirm_hash', 'pending_until')
redis.call('PERSIST', rec)
redis.call('PERSIST', P .. 'email:' .. f[4])
redis.call('SADD', P .. 'confirmed', id)
return id
`);

const REMOVE = new LuaScript(`
local P = ARGV[1]
local f = redis.call('HMGET', KEYS[1], 'email_key', 'confirm_hash')
if not f[1] then return 0 end
local index = P .. 'email:' .. f[1]
if redis.call('GET', index) == ARGV[2] then redis.call('DEL', index) end
if f[2] then redis.call('DEL', P .. 'confirm:' .. f[2]) end
redis.call('DEL', KEYS[1])
redis.call('SREM', P .. 'confirmed', ARGV[2])
return 1
`);

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function fromHash(id: string, h: Record<string, string>): Subscriber | undefined {
  if (h.email === undefined || h.confirmed === undefined) return undefined;
  return {
    id,
    email: h.email,
    confirmed: h.confirmed === '1',
    createdAt: Number(h.created_at),
    confirmedAt: h.confirmed_at === undefined ? null : Number(h.confirmed_at),
    pendingUntil: h.pending_until === undefined ? null : Number(h.pending_until),
  };
}

/** The distributed mode's subscribers, shared by every instance; so are the rate-limit windows. */
export class RedisSubscriberStore implements SubscriberStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix = DEFAULT_SUBSCRIBERS_PREFIX,
  ) {}

  async upsertPending(email: string, confirmHash: string, pendingUntil: number, now: number) {
    const emailKey = sha256(email);
    const [id, state] = (await UPSERT.run(
      this.redis,
      [`${this.prefix}email:${emailKey}`],
      [this.prefix, newSubscriberId(), email, confirmHash, pendingUntil, now, emailKey],
    )) as [string, 'pending' | 'confirmed'];
    return { id, state } as PendingResult;
  }

  async findPending(confirmHash: string, now: number) {
    const id = await this.redis.get(`${this.prefix}confirm:${confirmHash}`);
    if (id === null) return undefined;
    const s = await this.get(id);
    return s && !s.confirmed && (s.pendingUntil ?? 0) > now ? s : undefined;
  }

  async confirm(confirmHash: string, now: number) {
    const id = (await CONFIRM.run(
      this.redis,
      [`${this.prefix}confirm:${confirmHash}`],
      [this.prefix, now, confirmHash],
    )) as string | null;
    return id === null ? undefined : this.get(id);
  }

  async get(id: string) {
    return fromHash(id, await this.redis.hgetall(`${this.prefix}sub:${id}`));
  }

  async remove(id: string) {
    return (await REMOVE.run(this.redis, [`${this.prefix}sub:${id}`], [this.prefix, id])) === 1;
  }

  async listConfirmed() {
    const ids = await this.redis.smembers(`${this.prefix}confirmed`);
    if (ids.length === 0) return [];
    const pipeline = this.redis.pipeline();
    for (const id of ids) pipeline.hgetall(`${this.prefix}sub:${id}`);
    const results = (await pipeline.exec()) ?? [];
    const out: Subscriber[] = [];
    results.forEach(([error, h], i) => {
      const id = ids[i];
      const s = error || id === undefined ? undefined : fromHash(id, h as Record<string, string>);
      if (s?.confirmed) out.push(s);
    });
    return out.sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id));
  }

  async purgeExpired(_now: number) {}

  async hit(bucket: string, windowMs: number, now: number) {
    const start = now - (now % windowMs);
    // The bucket names an address or an IP: only its hash goes into a key name.
    const key = `${this.prefix}rate:${sha256(bucket).slice(0, 32)}:${windowMs}:${start}`;
    const results = await this.redis.multi().incr(key).pexpire(key, windowMs).exec();
    const [error, count] = results?.[0] ?? [new Error('rate window not counted'), 0];
    if (error) throw error;
    return Number(count);
  }

  async close() {}
}
