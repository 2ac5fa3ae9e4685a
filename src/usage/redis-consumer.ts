import type { Redis } from 'ioredis';
import type { UsageRecord } from './record.js';
import { fromStreamFields } from './redis-fields.js';

/**
 * Reading the usage stream with a consumer group, for billing and tests. Delivery is at-least-once
 * (a consumer that dies before XACK gets its entries again), so consumers deduplicate by record id.
 */

export interface UsageEntry {
  /** The stream entry id, for XACK. */
  entryId: string;
  record: UsageRecord;
}

export interface ReadUsageOptions {
  /** Wait up to this long for entries (XREADGROUP BLOCK); blocks the connection, so use a dedicated one. */
  blockMs?: number;
  /** '>' (default): entries never delivered to the group; '0': this consumer's unacknowledged entries. */
  startId?: '>' | '0';
}

/** Creates the group (and the stream) if missing; from the start of the stream, so nothing is skipped. */
export async function ensureConsumerGroup(redis: Redis, stream: string, group: string): Promise<void> {
  try {
    await redis.xgroup('CREATE', stream, group, '0', 'MKSTREAM');
  } catch (error) {
    if (!(error instanceof Error) || !error.message.startsWith('BUSYGROUP')) throw error;
  }
}

export async function readUsageEntries(
  redis: Redis,
  stream: string,
  group: string,
  consumer: string,
  count: number,
  options: ReadUsageOptions = {},
): Promise<UsageEntry[]> {
  const block = options.blockMs === undefined ? [] : ['BLOCK', options.blockMs];
  const reply = await redis.call(
    'XREADGROUP',
    'GROUP',
    group,
    consumer,
    'COUNT',
    count,
    ...block,
    'STREAMS',
    stream,
    options.startId ?? '>',
  );
  return streamItems(reply).map(([entryId, fields]) => ({ entryId, record: fromStreamFields(fields) }));
}

export async function ackUsage(
  redis: Redis,
  stream: string,
  group: string,
  entryIds: string[],
): Promise<number> {
  if (entryIds.length === 0) return 0;
  return redis.xack(stream, group, ...entryIds);
}

/** Reads up to `count` new records and acknowledges them at once (at-most-once for this reader). */
export async function readUsage(
  redis: Redis,
  stream: string,
  group: string,
  consumer: string,
  count: number,
  options: ReadUsageOptions = {},
): Promise<UsageRecord[]> {
  const entries = await readUsageEntries(redis, stream, group, consumer, count, options);
  await ackUsage(
    redis,
    stream,
    group,
    entries.map((e) => e.entryId),
  );
  return entries.map((e) => e.record);
}

type Item = [string, string[]];

/**
 * The entries of a one-stream XREADGROUP reply, whatever the protocol: RESP2 `[[key, items]]`, RESP3
 * read as a flat map `[key, items]` or as an object `{key: items}`. Deleted entries (null fields) are skipped.
 */
function streamItems(reply: unknown): Item[] {
  if (reply === null || reply === undefined) return [];
  let items: unknown;
  if (Array.isArray(reply)) {
    const first: unknown = reply[0];
    items = Array.isArray(first) ? first[1] : reply[1];
  } else if (typeof reply === 'object') {
    items = Object.values(reply)[0];
  }
  if (!Array.isArray(items)) return [];
  const out: Item[] = [];
  for (const item of items) {
    if (!Array.isArray(item) || typeof item[0] !== 'string' || !Array.isArray(item[1])) continue;
    out.push([item[0], item[1].map(String)]);
  }
  return out;
}
