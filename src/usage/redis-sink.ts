import type { Redis } from 'ioredis';
import { assertUsageBatch, type UsageRecord } from './record.js';
import { toStreamFields } from './redis-fields.js';
import { LuaScript } from './redis-script.js';
import type { UsageSink } from './sink.js';

/** Hash-tagged so the stream and its seen-markers share one Cluster slot (one script touches both). */
export const DEFAULT_USAGE_STREAM = 'gantry:{usage}';

export interface RedisStreamSinkOptions {
  /** Stream key; default 'gantry:{usage}'. Seen-markers live at `<stream>:seen:<record id>`. */
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
}

/*
 * KEYS[1] the stream, KEYS[1 + i] the seen-marker of record i.
 * ARGV[1] ttl, ARGV[2] maxlen (0: none), then per record: its field count, then its fields.
 * The type check comes first so a misconfigured key fails before anything is written; each record is
 * added before its marker is set, so even a script that fails half-way leaves a retry exactly-once.
 */
const ADD_SCRIPT = new LuaScript(`
local kind = redis.call('TYPE', KEYS[1])
kind = type(kind) == 'table' and kind.ok or kind
if kind ~= 'stream' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE usage stream key holds a ' .. kind)
end
local ttl = ARGV[1]
local maxlen = tonumber(ARGV[2])
local pos = 3
local added = 0
for i = 2, #KEYS do
  local n = tonumber(ARGV[pos])
  if redis.call('EXISTS', KEYS[i]) == 0 then
    local args = { KEYS[1] }
    if maxlen > 0 then
      args[#args + 1] = 'MAXLEN'
      args[#args + 1] = '~'
      args[#args + 1] = maxlen
    end
    args[#args + 1] = '*'
    for j = pos + 1, pos + n do args[#args + 1] = ARGV[j] end
    redis.call('XADD', unpack(args))
    redis.call('SET', KEYS[i], '1', 'EX', ttl)
    added = added + 1
  end
  pos = pos + n + 1
end
return added
`);

/**
 * The distributed mode's usage sink: each batch is one script call that XADDs every record not seen
 * before to a Redis Stream. Billing reads it with a consumer group (see redis-consumer.ts).
 */
export class RedisStreamSink implements UsageSink {
  readonly name = 'redis';
  readonly stream: string;
  private readonly maxLen: number;
  private readonly ttl: number;

  /** The client is the caller's: close() leaves it open. */
  constructor(
    private readonly redis: Redis,
    options: RedisStreamSinkOptions = {},
  ) {
    this.stream = options.stream ?? DEFAULT_USAGE_STREAM;
    this.maxLen = options.maxLen === null ? 0 : (options.maxLen ?? 1_000_000);
    this.ttl = options.dedupeTtlSeconds ?? 3600;
  }

  async write(records: UsageRecord[]): Promise<void> {
    await this.add(records);
  }

  /** Resolves to the number of records actually added (the others had been written before). */
  async add(records: UsageRecord[]): Promise<number> {
    if (records.length === 0) return 0;
    assertUsageBatch(records);
    const keys = [this.stream];
    const args: Array<string | number> = [this.ttl, this.maxLen];
    for (const r of records) {
      keys.push(`${this.stream}:seen:${r.id}`);
      const fields = toStreamFields(r);
      args.push(fields.length, ...fields);
    }
    return Number(await ADD_SCRIPT.run(this.redis, keys, args));
  }

  async close(): Promise<void> {}
}
