import type { UsageRecord } from './record.js';

/**
 * Where usage records go. `write` stores a whole batch or none of it and is idempotent by record id:
 * the batcher retries a failed batch with the same ids, so a write that landed but reported failure
 * must not duplicate. `close` releases only what the sink opened itself (never a client it was given).
 */
export interface UsageSink {
  /** Shown in errors and stats, e.g. 'sqlite', 'redis', 'jsonl'. */
  readonly name?: string;
  write(records: UsageRecord[]): Promise<void>;
  close(): Promise<void>;
}
