import type { Redis } from 'ioredis';
import { toMicros } from './credits.js';
import { assertUsageBatch, type UsageRecord } from './record.js';
import { toStreamFields } from './redis-fields.js';
import { LuaScript } from './redis-script.js';
import type { UsageSink } from './sink.js';

/**
 * Hash-tagged so the stream, its seen-markers and its day totals share one Cluster slot (one script touches
 * all of them).
 */
export const DEFAULT_USAGE_STREAM = 'gantry:{usage}';

/** How long a day's usage totals are kept by default: a year and a bit, so a year ago can be compared. */
export const DEFAULT_DAY_TTL_SECONDS = 400 * 86_400;

/**
 * The hash of one UTC day's usage totals (README, "Usage queries"), beside the stream so one script
 * writes both: fields `<account id>\t<model>\t<measure>` with measures `requests`, `input_tokens`,
 * `output_tokens` and `cost_micros` (credits in integer micro-credits, summed exactly with HINCRBY).
 */
export function usageDayKey(stream: string, day: string): string {
  return `${stream}:day:${day}`;
}

export interface RedisStreamSinkOptions {
  /**
   * Stream key; default 'gantry:{usage}'. Seen-markers live at `<stream>:seen:<record id>`, the daily
   * totals at `<stream>:day:<YYYY-MM-DD>` (the stream's hash tag puts all of them in its Cluster slot).
   */
  stream?: string;
  /**
   * Approximate cap on the stream length (XADD MAXLEN ~). Trimming ignores consumer groups, so size it
   * to hold several hours of records for a lagging billing consumer. Default 1,000,000; null: no cap.
   */
  maxLen?: number | null;
  /**
   * How long a written id is remembered to refuse a duplicate, in seconds. It only has to outlive the
   * batcher's retry of a write whose reply was lost; each marker costs ~100 bytes. Default 3600.
   */
  dedupeTtlSeconds?: number;
  /** How long a day's totals live after its last write, in seconds. Default 400 days. */
  dayTtlSeconds?: number;
}

/*
 * KEYS[1] the stream, KEYS[1 + i] the seen-marker of record i (i = 1..n), then the day hashes the batch
 * touches.
 * ARGV[1] dedupe ttl, ARGV[2] maxlen (0: none), ARGV[3] n, ARGV[4] day ttl, then per record: the index
 * of its day hash in KEYS, its `<account>\t<model>\t` field prefix, input tokens, output tokens, cost in
 * micro-credits, its field count, then its fields.
 * The type checks come first so a misconfigured key fails before anything is written. A record's entry
 * and its day totals are written before its marker is set, and only when the marker is absent: a retry
 * of a batch (even of a script that failed half-way) adds each record and counts it exactly once.
 */
const ADD_SCRIPT = new LuaScript(`
local function kind_of(key)
  local kind = redis.call('TYPE', key)
  return type(kind) == 'table' and kind.ok or kind
end
local kind = kind_of(KEYS[1])
if kind ~= 'stream' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE usage stream key holds a ' .. kind)
end
local n = tonumber(ARGV[3])
for i = n + 2, #KEYS do
  kind = kind_of(KEYS[i])
  if kind ~= 'hash' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE usage day key ' .. KEYS[i] .. ' holds a ' .. kind)
  end
end
local ttl = ARGV[1]
local maxlen = tonumber(ARGV[2])
local dayttl = ARGV[4]
local pos = 5
local added = 0
for i = 2, n + 1 do
  local day = KEYS[tonumber(ARGV[pos])]
  local prefix = ARGV[pos + 1]
  local count = tonumber(ARGV[pos + 5])
  local first = pos + 6
  if redis.call('EXISTS', KEYS[i]) == 0 then
    local args = { KEYS[1] }
    if maxlen > 0 then
      args[#args + 1] = 'MAXLEN'
      args[#args + 1] = '~'
      args[#args + 1] = maxlen
    end
    args[#args + 1] = '*'
    for j = first, first + count - 1 do args[#args + 1] = ARGV[j] end
    redis.call('XADD', unpack(args))
    redis.call('HINCRBY', day, prefix .. 'requests', 1)
    redis.call('HINCRBY', day, prefix .. 'input_tokens', ARGV[pos + 2])
    redis.call('HINCRBY', day, prefix .. 'output_tokens', ARGV[pos + 3])
    redis.call('HINCRBY', day, prefix .. 'cost_micros', ARGV[pos + 4])
    redis.call('EXPIRE', day, dayttl)
    redis.call('SET', KEYS[i], '1', 'EX', ttl)
    added = added + 1
  end
  pos = first + count
end
return added
`);

/**
 * The distributed mode's usage sink: each batch is one script call that XADDs every record not seen
 * before to a Redis Stream, and adds it to its day's totals. Billing reads the stream with a consumer
 * group (see redis-consumer.ts); the admin API's usage queries read the totals (query-redis.ts).
 */
export class RedisStreamSink implements UsageSink {
  readonly name = 'redis';
  readonly stream: string;
  private readonly maxLen: number;
  private readonly ttl: number;
  private readonly dayTtl: number;

  /** The client is the caller's: close() leaves it open. */
  constructor(
    private readonly redis: Redis,
    options: RedisStreamSinkOptions = {},
  ) {
    this.stream = options.stream ?? DEFAULT_USAGE_STREAM;
    this.maxLen = options.maxLen === null ? 0 : (options.maxLen ?? 1_000_000);
    this.ttl = options.dedupeTtlSeconds ?? 3600;
    this.dayTtl = options.dayTtlSeconds ?? DEFAULT_DAY_TTL_SECONDS;
  }

  async write(records: UsageRecord[]): Promise<void> {
    await this.add(records);
  }

  /** Resolves to the number of records actually added (the others had been written before). */
  async add(records: UsageRecord[]): Promise<number> {
    if (records.length === 0) return 0;
    assertUsageBatch(records);
    const markers: string[] = [];
    const days: string[] = [];
    const dayIndex = new Map<string, number>();
    const perRecord: Array<string | number> = [];
    for (const r of records) {
      markers.push(`${this.stream}:seen:${r.id}`);
      // time is toISOString(): its first ten characters are the UTC day.
      const day = r.time.slice(0, 10);
      let index = dayIndex.get(day);
      if (index === undefined) {
        days.push(usageDayKey(this.stream, day));
        // KEYS is 1-based in Lua: the stream, the n markers, then the days.
        index = 1 + records.length + days.length;
        dayIndex.set(day, index);
      }
      const fields = toStreamFields(r);
      perRecord.push(
        index,
        `${r.account_id}\t${r.model}\t`,
        r.input_tokens,
        r.output_tokens,
        toMicros(r.credits),
        fields.length,
        ...fields,
      );
    }
    const keys = [this.stream, ...markers, ...days];
    const args = [this.ttl, this.maxLen, records.length, this.dayTtl, ...perRecord];
    return Number(await ADD_SCRIPT.run(this.redis, keys, args));
  }

  async close(): Promise<void> {}
}
