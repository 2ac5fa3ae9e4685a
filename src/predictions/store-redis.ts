/**
 * The distributed mode's prediction store: predictions, their stream events and webhook deliveries in
 * Redis (run it with AOF for durability).
 *
 * Key layout under the prefix (default `gantry:pred:`), variable parts URI-encoded:
 *   {<id>}                        hash: the prediction, one JSON-encoded field per record property
 *   {<id>}:events                 list: the SSE stream events; an event's seq is its list position
 *   {<id>}:deliveries             zset: the prediction's delivery ids by seq
 *   {<id>}:delivery-seq           counter: the last delivery seq handed out
 *   {<id>}:abandoned              string: set by abandon(); a create arriving after it is refused (TTL 1 h)
 *   delivery:<deliveryId>         hash: one delivery, one JSON-encoded field per property
 *   account:<accountId>           zset: prediction ids by createdAt (list)
 *   account:<accountId>:model:<m> zset: the same, for one model (list with a model filter)
 *   idempotency:<account>:<key>   string: the prediction id created with that key (TTL 24 h)
 *   unfinished                    zset: ids of non-terminal predictions by createdAt
 *   purge                         zset: ids of completed predictions not yet purged, by completedAt
 *   deliveries:pending            zset: ids of pending deliveries by nextAttemptAt
 *
 * Predictions, events and deliveries carry no TTL: they are kept until delete() (the retention purge
 * removes files, not records). Only idempotency keys expire, after 24 hours.
 *
 * The `{<id>}` hash tag keeps every key of one prediction in one Redis Cluster slot. Two scripts span
 * slots, which needs a single Redis (Gantry's prediction client is not a Cluster client): a status
 * change with its webhook deliveries (the outbox) writes the prediction, the delivery hashes and the
 * pending index in one atomic step, and a create writes the prediction, its idempotency key and the
 * account's list indexes in one step that an abandon() cannot split. The other shared indexes (unfinished, purge, pending)
 * live in other slots and are therefore written by separate commands, ordered so that a crash between
 * two writes leaves an index entry too many rather than one too few: entries that drive recovery
 * (unfinished, purge, pending) are added before the record changes and removed after, and every reader
 * checks the record and drops stale entries.
 */
import type { Redis } from 'ioredis';
import { LuaScript } from '../usage/redis-script.js';
import {
  type DeliveryRecord,
  isTerminal,
  type ListQuery,
  type NewDelivery,
  type PredictionPatch,
  type PredictionRecord,
  type PredictionStatus,
  type PredictionStore,
  type StreamEvent,
} from './types.js';

export const DEFAULT_PREDICTION_PREFIX = 'gantry:pred:';
const IDEMPOTENCY_TTL_SECONDS = 24 * 60 * 60;
const ACTIVE_STATUSES: readonly PredictionStatus[] = ['starting', 'processing'];
/** Pages a reader looks through while skipping stale index entries, before it returns what it has. */
const MAX_INDEX_PAGES = 20;

type DeliveryPatch = Partial<Pick<DeliveryRecord, 'state' | 'attempts' | 'nextAttemptAt' | 'log'>>;

/** Fields beside the record's own in the prediction hash; the leading `_` keeps them apart. */
const IDEMPOTENCY_FIELD = '_idempotency';

/*
 * The whole create in one atomic step, so an abandon() is either wholly before it (refused, -1) or
 * wholly after it (and removes all of it). KEYS[1] the prediction hash, KEYS[2] its abandoned marker,
 * KEYS[3] and KEYS[4] the account's list indexes, KEYS[5] the idempotency key if any. ARGV[1] the id,
 * ARGV[2] createdAt, ARGV[3] the key's TTL, ARGV[4] the id of a vanished prediction the key may still
 * name ('' for none), then the hash's field/value pairs. Returns 1 (created), 0 (the id exists), -1
 * (abandoned), or the id of the live prediction that already holds the key (nothing written).
 */
const CREATE_SCRIPT = new LuaScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if KEYS[5] then
  local holder = redis.call('GET', KEYS[5])
  if holder and holder ~= ARGV[4] then return holder end
  redis.call('SET', KEYS[5], ARGV[1], 'EX', ARGV[3])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
return 1
`);
/** Holders of an idempotency key found gone (crashes between writes) before a create gives up. */
const MAX_STALE_HOLDERS = 3;
const ABANDONED_TTL_SECONDS = 60 * 60;

/** Both conditional writes start here: nil unless KEYS[1] exists with one of ARGV[2..ARGV[1]+1] as its status. */
const STATUS_GUARD = `local status = redis.call('HGET', KEYS[1], 'status')
if not status then return false end
local n = tonumber(ARGV[1])
local allowed = false
for i = 2, n + 1 do
  if ARGV[i] == status then allowed = true break end
end
if not allowed then return false end
`;

/*
 * KEYS[1] the prediction hash. ARGV[1] n, ARGV[2..n+1] the allowed statuses (JSON-encoded, as stored),
 * then the field/value pairs to set. Returns the whole hash after the update, or nil when the prediction
 * is missing or its status is not allowed: the check and the write are one atomic step.
 */
const UPDATE_SCRIPT = new LuaScript(`
${STATUS_GUARD}if #ARGV > n + 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, n + 2))
end
return redis.call('HGETALL', KEYS[1])
`);

/*
 * UPDATE_SCRIPT with the outbox. KEYS[1] the prediction hash, KEYS[2] its deliveries zset, KEYS[3] its
 * delivery seq counter, KEYS[4] the pending deliveries index, KEYS[5..] the new deliveries' hashes.
 * ARGV[1] n, ARGV[2..n+1] the allowed statuses, then m and m field/value args of the patch, then per
 * delivery: its id, nextAttemptAt, k and k field/value args (seq is added here). Returns the whole
 * prediction hash, or nil (and writes nothing) when the condition fails.
 */
const TRANSITION_SCRIPT = new LuaScript(`
${STATUS_GUARD}local i = n + 2
local m = tonumber(ARGV[i])
if m > 0 then redis.call('HSET', KEYS[1], unpack(ARGV, i + 1, i + m)) end
i = i + m + 1
for d = 5, #KEYS do
  local id, due, k = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local seq = redis.call('INCR', KEYS[3])
  redis.call('HSET', KEYS[d], 'seq', seq, unpack(ARGV, i + 3, i + 2 + k))
  redis.call('ZADD', KEYS[2], seq, id)
  redis.call('ZADD', KEYS[4], due, id)
  i = i + 3 + k
end
return redis.call('HGETALL', KEYS[1])
`);

/* KEYS[1] a hash; ARGV field/value pairs. Writes only into an existing hash (no half-records). */
const PATCH_EXISTING_SCRIPT = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('HSET', KEYS[1], unpack(ARGV))
return redis.call('HGETALL', KEYS[1])
`);

/* KEYS[1] the prediction hash, KEYS[2] its event list; ARGV[1] the event. 0 when the prediction is gone. */
const APPEND_EVENT_SCRIPT = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('RPUSH', KEYS[2], ARGV[1])
`);

/* KEYS[1] an idempotency key; ARGV[1] a prediction id. Deletes the key only while it still maps to it. */
const RELEASE_IDEMPOTENCY_SCRIPT = new LuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`);

const enc = encodeURIComponent;

class PredictionKeys {
  readonly unfinished: string;
  readonly purge: string;
  readonly pendingDeliveries: string;

  constructor(private readonly prefix: string) {
    this.unfinished = `${prefix}unfinished`;
    this.purge = `${prefix}purge`;
    this.pendingDeliveries = `${prefix}deliveries:pending`;
  }

  prediction(id: string): string {
    return `${this.prefix}{${enc(id)}}`;
  }
  events(id: string): string {
    return `${this.prediction(id)}:events`;
  }
  deliveriesOf(id: string): string {
    return `${this.prediction(id)}:deliveries`;
  }
  deliverySeq(id: string): string {
    return `${this.prediction(id)}:delivery-seq`;
  }
  abandoned(id: string): string {
    return `${this.prediction(id)}:abandoned`;
  }
  delivery(deliveryId: string): string {
    return `${this.prefix}delivery:${enc(deliveryId)}`;
  }
  account(accountId: string): string {
    return `${this.prefix}account:${enc(accountId)}`;
  }
  accountModel(accountId: string, model: string): string {
    return `${this.account(accountId)}:model:${enc(model)}`;
  }
  idempotency(accountId: string, key: string): string {
    return `${this.prefix}idempotency:${enc(accountId)}:${enc(key)}`;
  }
}

/** Field/value pairs with JSON-encoded values; undefined values are left out (as JSON would). */
function encodeFields(values: object): string[] {
  const pairs: string[] = [];
  for (const [field, value] of Object.entries(values)) {
    if (value !== undefined) pairs.push(field, JSON.stringify(value));
  }
  return pairs;
}

function decodeFields(hash: Record<string, string>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(hash)) {
    if (!field.startsWith('_')) out[field] = JSON.parse(value);
  }
  return out;
}

/** A flat HGETALL reply from a script ([field, value, …]) as an object. */
function pairsToHash(reply: unknown): Record<string, string> | undefined {
  if (!Array.isArray(reply)) return undefined;
  const hash: Record<string, string> = {};
  for (let i = 0; i + 1 < reply.length; i += 2) hash[String(reply[i])] = String(reply[i + 1]);
  return hash;
}

function toPrediction(hash: Record<string, string> | undefined): PredictionRecord | undefined {
  if (!hash || hash.id === undefined) return undefined;
  return decodeFields(hash) as unknown as PredictionRecord;
}

function toDelivery(hash: Record<string, string> | undefined): DeliveryRecord | undefined {
  if (!hash || hash.id === undefined) return undefined;
  return decodeFields(hash) as unknown as DeliveryRecord;
}

function isPurgeCandidate(record: PredictionRecord): boolean {
  return record.completedAt !== null && !record.dataRemoved;
}

function isDuePending(delivery: DeliveryRecord, before: number): boolean {
  return delivery.state === 'pending' && delivery.nextAttemptAt !== null && delivery.nextAttemptAt <= before;
}

export interface RedisPredictionStoreOptions {
  /** Key prefix; default 'gantry:pred:'. */
  prefix?: string;
}

export class RedisPredictionStore implements PredictionStore {
  private readonly keys: PredictionKeys;

  /** The client is the caller's: close() leaves it open. */
  constructor(
    private readonly redis: Redis,
    options: RedisPredictionStoreOptions = {},
  ) {
    this.keys = new PredictionKeys(options.prefix ?? DEFAULT_PREDICTION_PREFIX);
  }

  async create(
    record: PredictionRecord,
    idempotencyKey?: string,
  ): Promise<{ record: PredictionRecord; created: boolean }> {
    const { id } = record;
    const idemKey =
      idempotencyKey === undefined ? undefined : this.keys.idempotency(record.accountId, idempotencyKey);
    // Recovery indexes first: a crash after this leaves an entry the readers drop, never a lost prediction.
    await this.addRecoveryEntries(record);
    const fields = encodeFields(record);
    if (idemKey) fields.push(IDEMPOTENCY_FIELD, idemKey);
    const keys = [
      this.keys.prediction(id),
      this.keys.abandoned(id),
      this.keys.account(record.accountId),
      this.keys.accountModel(record.accountId, record.model),
      ...(idemKey ? [idemKey] : []),
    ];
    let staleHolder = '';
    for (let tries = 0; tries <= MAX_STALE_HOLDERS; tries++) {
      const reply = await CREATE_SCRIPT.run(this.redis, keys, [
        id,
        record.createdAt,
        IDEMPOTENCY_TTL_SECONDS,
        staleHolder,
        ...fields,
      ]);
      if (reply === 1) return { record, created: true };
      if (reply === -1) throw new Error(`prediction ${id} was abandoned by its caller`);
      if (reply === 0) throw new Error(`prediction ${id} already exists`);
      // A retried create: ours was never written, so only its recovery entries are taken back.
      const existing = await this.get(String(reply));
      if (existing) {
        await this.removeRecoveryEntries(id);
        return { record: existing, created: false };
      }
      // The key outlived its prediction (a crash between writes): it is ours, if nobody took it since.
      staleHolder = String(reply);
    }
    throw new Error(`idempotency key of prediction ${id} keeps changing hands`);
  }

  async findByIdempotencyKey(accountId: string, key: string): Promise<PredictionRecord | undefined> {
    const id = await this.redis.get(this.keys.idempotency(accountId, key));
    return id === null ? undefined : this.get(id);
  }

  async get(id: string): Promise<PredictionRecord | undefined> {
    return toPrediction(await this.redis.hgetall(this.keys.prediction(id)));
  }

  async update(
    id: string,
    patch: PredictionPatch,
    from: readonly PredictionStatus[] = ACTIVE_STATUSES,
    outbox: readonly NewDelivery[] = [],
  ): Promise<PredictionRecord | undefined> {
    if (patch.completedAt != null && patch.dataRemoved !== true) {
      // Before the write, like create: an extra entry is dropped by dueForPurge, a missing one never purges.
      await this.redis.zadd(this.keys.purge, patch.completedAt, id);
    }
    const args: Array<string | number> = [from.length, ...from.map((s) => JSON.stringify(s))];
    const fields = encodeFields({ ...patch, updatedAt: Date.now() });
    let reply: unknown;
    if (outbox.length === 0) {
      reply = await UPDATE_SCRIPT.run(this.redis, [this.keys.prediction(id)], [...args, ...fields]);
    } else {
      const keys = [
        this.keys.prediction(id),
        this.keys.deliveriesOf(id),
        this.keys.deliverySeq(id),
        this.keys.pendingDeliveries,
      ];
      args.push(fields.length, ...fields);
      for (const delivery of outbox) {
        const deliveryFields = encodeFields({ ...delivery, predictionId: id, state: 'pending' });
        keys.push(this.keys.delivery(delivery.id));
        args.push(
          delivery.id,
          delivery.nextAttemptAt ?? Date.now(),
          deliveryFields.length,
          ...deliveryFields,
        );
      }
      reply = await TRANSITION_SCRIPT.run(this.redis, keys, args);
    }
    const record = toPrediction(pairsToHash(reply));
    if (!record) return undefined;
    if (isTerminal(record.status)) await this.redis.zrem(this.keys.unfinished, id);
    if (record.dataRemoved) await this.redis.zrem(this.keys.purge, id);
    return record;
  }

  async list(query: ListQuery): Promise<{ records: PredictionRecord[]; total: number }> {
    const key =
      query.model === undefined
        ? this.keys.account(query.accountId)
        : this.keys.accountModel(query.accountId, query.model);
    const min = query.from === undefined ? '-inf' : String(query.from);
    const max = query.to === undefined ? '+inf' : `(${query.to}`;
    const [ids, total] = await Promise.all([
      query.limit > 0
        ? this.redis.zrange(key, max, min, 'BYSCORE', 'REV', 'LIMIT', query.offset, query.limit)
        : Promise.resolve([]),
      this.redis.zcount(key, min, max),
    ]);
    const records = await Promise.all(ids.map((id) => this.get(id)));
    return { records: records.filter((r): r is PredictionRecord => r !== undefined), total };
  }

  async delete(id: string): Promise<boolean> {
    const record = await this.get(id);
    const [idemKey, deliveryIds] = await Promise.all([
      this.redis.hget(this.keys.prediction(id), IDEMPOTENCY_FIELD),
      this.redis.zrange(this.keys.deliveriesOf(id), '0', '-1'),
    ]);
    // Everything that points at the prediction goes first, the record itself last: a delete cut short is
    // finished by the next one, and no index is left naming a record that is gone.
    const removals: Array<Promise<unknown>> = [
      this.redis.zrem(this.keys.unfinished, id),
      this.redis.zrem(this.keys.purge, id),
      ...deliveryIds.map((d) => this.redis.del(this.keys.delivery(d))),
    ];
    if (deliveryIds.length > 0) removals.push(this.redis.zrem(this.keys.pendingDeliveries, ...deliveryIds));
    if (record) {
      removals.push(
        this.redis.zrem(this.keys.account(record.accountId), id),
        this.redis.zrem(this.keys.accountModel(record.accountId, record.model), id),
      );
    }
    if (idemKey) removals.push(RELEASE_IDEMPOTENCY_SCRIPT.run(this.redis, [idemKey], [id]));
    await Promise.all(removals);
    await this.redis.del(this.keys.events(id), this.keys.deliveriesOf(id), this.keys.deliverySeq(id));
    return (await this.redis.del(this.keys.prediction(id))) > 0;
  }

  async abandon(id: string, idempotency?: { accountId: string; key: string }): Promise<void> {
    // One connection keeps order: the marker and the key's release are sent at once, so they reach
    // Redis before any step of the create not yet sent (the create script then refuses) and before the
    // caller's retry; a create already applied is deleted after them. EVAL, not EVALSHA: its NOSCRIPT
    // fallback would be sent later, out of that order.
    const sent: Array<Promise<unknown>> = [
      this.redis.set(this.keys.abandoned(id), '1', 'EX', ABANDONED_TTL_SECONDS),
    ];
    if (idempotency) {
      const key = this.keys.idempotency(idempotency.accountId, idempotency.key);
      sent.push(this.redis.eval(RELEASE_IDEMPOTENCY_SCRIPT.source, 1, key, id));
    }
    await Promise.all(sent);
    await this.delete(id);
  }

  async unfinished(limit: number): Promise<string[]> {
    return this.collect(this.keys.unfinished, '+inf', limit, async (id) => {
      const record = await this.get(id);
      return record !== undefined && !isTerminal(record.status);
    });
  }

  async dueForPurge(before: number, limit: number): Promise<string[]> {
    return this.collect(this.keys.purge, `(${before}`, limit, async (id) => {
      const record = await this.get(id);
      if (record && isPurgeCandidate(record)) return record.completedAt! < before ? true : 'keep';
      return false;
    });
  }

  /**
   * Stores the event with the next seq (its position in the prediction's list, so seqs have no gaps).
   * For a prediction that no longer exists nothing is stored and seq is 0.
   */
  async appendStreamEvent(predictionId: string, event: Omit<StreamEvent, 'seq'>): Promise<StreamEvent> {
    const payload = JSON.stringify({ event: event.event, data: event.data });
    const seq = await APPEND_EVENT_SCRIPT.run(
      this.redis,
      [this.keys.prediction(predictionId), this.keys.events(predictionId)],
      [payload],
    );
    return { seq: Number(seq), event: event.event, data: event.data };
  }

  async streamEvents(predictionId: string, afterSeq: number): Promise<StreamEvent[]> {
    const start = Math.max(0, Math.floor(afterSeq));
    const items = await this.redis.lrange(this.keys.events(predictionId), start, -1);
    return items.map((item, i) => {
      const { event, data } = JSON.parse(item) as Omit<StreamEvent, 'seq'>;
      return { seq: start + i + 1, event, data };
    });
  }

  async addDelivery(delivery: Omit<DeliveryRecord, 'seq'>): Promise<DeliveryRecord> {
    const seq = await this.redis.incr(this.keys.deliverySeq(delivery.predictionId));
    const stored: DeliveryRecord = { ...delivery, seq };
    if (isDuePending(stored, Number.POSITIVE_INFINITY)) {
      await this.redis.zadd(this.keys.pendingDeliveries, stored.nextAttemptAt!, stored.id);
    }
    await this.redis.hset(this.keys.delivery(stored.id), ...encodeFields(stored));
    await this.redis.zadd(this.keys.deliveriesOf(stored.predictionId), seq, stored.id);
    return stored;
  }

  async getDelivery(id: string): Promise<DeliveryRecord | undefined> {
    return toDelivery(await this.redis.hgetall(this.keys.delivery(id)));
  }

  async updateDelivery(id: string, patch: DeliveryPatch): Promise<void> {
    const fields = encodeFields(patch);
    if (fields.length === 0) return;
    if (patch.state === 'pending' && patch.nextAttemptAt != null) {
      await this.redis.zadd(this.keys.pendingDeliveries, patch.nextAttemptAt, id);
    }
    const reply = await PATCH_EXISTING_SCRIPT.run(this.redis, [this.keys.delivery(id)], fields);
    const delivery = toDelivery(pairsToHash(reply));
    if (!delivery) return;
    if (isDuePending(delivery, Number.POSITIVE_INFINITY)) {
      await this.redis.zadd(this.keys.pendingDeliveries, delivery.nextAttemptAt!, id);
    } else {
      await this.redis.zrem(this.keys.pendingDeliveries, id);
    }
  }

  async deliveries(predictionId: string): Promise<DeliveryRecord[]> {
    const ids = await this.redis.zrange(this.keys.deliveriesOf(predictionId), '0', '-1');
    const found = await Promise.all(ids.map((id) => this.getDelivery(id)));
    return found.filter((d): d is DeliveryRecord => d !== undefined);
  }

  async pendingDeliveries(before: number, limit: number): Promise<string[]> {
    return this.collect(this.keys.pendingDeliveries, String(before), limit, async (id) => {
      const delivery = await this.getDelivery(id);
      if (!delivery || !isDuePending(delivery, Number.POSITIVE_INFINITY)) return false;
      return delivery.nextAttemptAt! <= before ? true : 'keep';
    });
  }

  async close(): Promise<void> {}

  private async addRecoveryEntries(record: PredictionRecord): Promise<void> {
    const writes: Array<Promise<unknown>> = [];
    if (!isTerminal(record.status))
      writes.push(this.redis.zadd(this.keys.unfinished, record.createdAt, record.id));
    if (isPurgeCandidate(record))
      writes.push(this.redis.zadd(this.keys.purge, record.completedAt!, record.id));
    await Promise.all(writes);
  }

  private async removeRecoveryEntries(id: string): Promise<void> {
    await Promise.all([this.redis.zrem(this.keys.unfinished, id), this.redis.zrem(this.keys.purge, id)]);
  }

  /**
   * Up to `limit` ids of an index zset with scores up to `max`, lowest first, that `check` confirms.
   * `false` marks a stale entry (removed from the index); `'keep'` one that is valid but not wanted now
   * (its score ran ahead of the record).
   */
  private async collect(
    key: string,
    max: string,
    limit: number,
    check: (id: string) => Promise<boolean | 'keep'>,
  ): Promise<string[]> {
    const found: string[] = [];
    let offset = 0;
    for (let page = 0; page < MAX_INDEX_PAGES && found.length < limit; page++) {
      const ids = await this.redis.zrange(key, '-inf', max, 'BYSCORE', 'LIMIT', offset, limit - found.length);
      if (ids.length === 0) break;
      const verdicts = await Promise.all(ids.map(check));
      const stale = ids.filter((_, i) => verdicts[i] === false);
      ids.forEach((id, i) => {
        if (verdicts[i] === true) found.push(id);
      });
      if (stale.length > 0) await this.redis.zrem(key, ...stale);
      offset += ids.length - stale.length;
    }
    return found;
  }
}
