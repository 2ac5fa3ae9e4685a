/**
 * Usage queries in distributed mode: the day hashes the Redis sink keeps beside the usage stream
 * (redis-sink.ts, usageDayKey), one HGETALL per day of the range in one pipeline. Each hash holds every
 * account's and model's totals of its day; the filters are applied here.
 */
import type { Redis } from 'ioredis';
import { fromMicros } from './credits.js';
import type { UsageDay, UsageQuery } from './query.js';
import { daysBetween } from './query-days.js';
import { usageDayKey } from './redis-sink.js';

type Measure = 'requests' | 'input_tokens' | 'output_tokens' | 'cost_micros';
const MEASURES: ReadonlySet<string> = new Set<Measure>([
  'requests',
  'input_tokens',
  'output_tokens',
  'cost_micros',
]);

interface Totals {
  accountId: string;
  model: string;
  requests: number;
  inputTokens: number;
  outputTokens: number;
  costMicros: number;
}

/** `client`: the control plane's connection (left open); `stream`: the sink's stream key (config usage.stream). */
export function createRedisUsageQuery(client: Redis, stream: string): UsageQuery {
  return {
    async daily(filter) {
      const days = daysBetween(filter.from, filter.to);
      if (days.length === 0) return [];
      const pipeline = client.pipeline();
      for (const day of days) pipeline.hgetall(usageDayKey(stream, day));
      const replies = (await pipeline.exec()) ?? [];
      const out: UsageDay[] = [];
      days.forEach((day, i) => {
        const [error, hash] = replies[i] ?? [new Error('no reply')];
        if (error) throw error;
        const rows = [...totalsOf(hash as Record<string, string>).values()]
          .filter((t) => filter.accountId === undefined || t.accountId === filter.accountId)
          .filter((t) => filter.model === undefined || t.model === filter.model)
          .sort((a, b) => compare(a.accountId, b.accountId) || compare(a.model, b.model));
        for (const t of rows) {
          out.push({
            day,
            accountId: t.accountId,
            model: t.model,
            requests: t.requests,
            inputTokens: t.inputTokens,
            outputTokens: t.outputTokens,
            cost: fromMicros(t.costMicros),
          });
        }
      });
      return out;
    },
    async close() {},
  };
}

/**
 * A day hash's fields `<account>\t<model>\t<measure>` grouped by account and model. Account ids hold no
 * tab, so the first tab ends the account; the measure follows the last one.
 */
function totalsOf(hash: Record<string, string>): Map<string, Totals> {
  const totals = new Map<string, Totals>();
  for (const [field, value] of Object.entries(hash)) {
    const first = field.indexOf('\t');
    const last = field.lastIndexOf('\t');
    if (first < 0 || last === first) continue;
    const measure = field.slice(last + 1);
    if (!MEASURES.has(measure)) continue;
    const group = field.slice(0, last);
    let t = totals.get(group);
    if (t === undefined) {
      t = {
        accountId: field.slice(0, first),
        model: field.slice(first + 1, last),
        requests: 0,
        inputTokens: 0,
        outputTokens: 0,
        costMicros: 0,
      };
      totals.set(group, t);
    }
    const n = Number(value);
    if (measure === 'requests') t.requests = n;
    else if (measure === 'input_tokens') t.inputTokens = n;
    else if (measure === 'output_tokens') t.outputTokens = n;
    else t.costMicros = n;
  }
  return totals;
}

/** Plain string order, as SQLite's default collation sorts the embedded mode's ids and names. */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
