export {
  UsageBatcher,
  type UsageBatcherOptions,
  type UsageBatcherStats,
  type UsageDropReason,
  type UsageSinkStats,
} from './batcher.js';
export type { CreditStore, Debit, DebitResult, DefaultBalance } from './credits.js';
export { creditRefusal, fromMicros, MICROS_PER_CREDIT, toMicros } from './credits.js';
export { RedisCreditStore, type RedisCreditStoreOptions } from './credits-redis.js';
export { CreditDebitSink } from './credits-sink.js';
export { type LedgerEntry, SqliteCreditStore, type SqliteCreditStoreOptions } from './credits-sqlite.js';
export { newUsageId, usageTime } from './id.js';
export { JsonlUsageSink, type JsonlUsageSinkOptions } from './jsonl-sink.js';
export type { MediaUnits, UsageApi, UsageOutcome, UsageRecord, UsageSafetyAction } from './record.js';
export { assertUsageBatch, UsageRecordError, usageRecordProblem } from './record.js';
export {
  ackUsage,
  ensureConsumerGroup,
  type ReadUsageOptions,
  readUsage,
  readUsageEntries,
  type UsageEntry,
} from './redis-consumer.js';
export { fromStreamFields, toStreamFields } from './redis-fields.js';
export { DEFAULT_USAGE_STREAM, RedisStreamSink, type RedisStreamSinkOptions } from './redis-sink.js';
export { predictionSafetyFields, safetyUsageFields } from './safety-fields.js';
export type { UsageSink } from './sink.js';
export { openDatabase, type SqliteDatabase } from './sqlite-db.js';
export { SqliteUsageSink, type UsageQuery } from './sqlite-sink.js';
