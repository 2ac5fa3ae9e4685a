import type { CreditStore, Debit } from './credits.js';
import type { UsageRecord } from './record.js';
import type { UsageSink } from './sink.js';

/**
 * Debits each record's credits from its account, as one more sink of the batcher: the debit leaves the
 * request path and is batched (one transaction or one script call per batch); the record id keeps a
 * retried batch from debiting twice. Records with 0 credits are skipped.
 */
export class CreditDebitSink implements UsageSink {
  readonly name = 'credits';

  constructor(private readonly credits: CreditStore) {}

  async write(records: UsageRecord[]): Promise<void> {
    const debits: Debit[] = [];
    for (const r of records) {
      if (r.credits > 0) debits.push({ accountId: r.account_id, credits: r.credits, recordId: r.id });
    }
    if (debits.length > 0) await this.credits.debitMany(debits);
  }

  /** The store is the caller's (balance reads go on using it). */
  async close(): Promise<void> {}
}
