import type { Redis } from 'ioredis';
import { DEFAULT_LIST_LIMIT, type HistoryQuery, type StatusChange, type StatusHistory } from './history.js';

export const DEFAULT_HISTORY_KEY = 'gantry:status-history';
/** Entries read per XREVRANGE while filtering by model or time. */
const PAGE = 200;

/**
 * The distributed mode's status history: one Redis stream shared by every instance, capped at
 * `maxEntries` (exact MAXLEN: changes are rare, so the exact trim costs nothing that matters). Each entry
 * is one JSON field, so a reader needs no schema of its own.
 */
export class RedisStatusHistory implements StatusHistory {
  constructor(
    private readonly redis: Redis,
    private readonly maxEntries: number,
    private readonly key = DEFAULT_HISTORY_KEY,
    private readonly ownsConnection = false,
  ) {}

  async record(change: StatusChange): Promise<void> {
    await this.redis.xadd(this.key, 'MAXLEN', String(this.maxEntries), '*', 'change', JSON.stringify(change));
  }

  async list(query: HistoryQuery = {}): Promise<StatusChange[]> {
    const limit = query.limit ?? DEFAULT_LIST_LIMIT;
    const since = query.since ?? 0;
    const found: StatusChange[] = [];
    let end = '+';
    for (;;) {
      const page = await this.redis.xrevrange(this.key, end, '-', 'COUNT', PAGE);
      for (const [, fields] of page) {
        const change = JSON.parse(fields[1] ?? '{}') as StatusChange;
        // Entries are in the order they were added: once older than `since`, the rest are too.
        if (change.at < since) return found;
        if (query.model !== undefined && change.model !== query.model) continue;
        found.push({ ...change, deployment: change.deployment ?? undefined });
        if (found.length >= limit) return found;
      }
      if (page.length < PAGE) return found;
      end = `(${(page[page.length - 1] as [string, string[]])[0]}`;
    }
  }

  async close(): Promise<void> {
    // disconnect, not quit: quit waits for a Redis that may be down (the writes were awaited before).
    if (this.ownsConnection) this.redis.disconnect();
  }
}
