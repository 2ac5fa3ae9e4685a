import type { UsageRecord } from '../../src/usage/record.js';
import type { TestGantry } from './gantry.js';

/**
 * An account's usage records from the embedded ledger once at least `count` are written (flushing the
 * batcher each time), or what is there after `timeoutMs`: the caller asserts on what it gets.
 */
export async function ledgerRecords(
  gantry: TestGantry,
  accountId: string,
  count: number,
  timeoutMs = 3000,
): Promise<UsageRecord[]> {
  const { usage, ledger } = gantry.gantry.services;
  if (!ledger) throw new Error('the embedded mode has a SQLite ledger');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await usage.flush();
    const records = ledger.list({ accountId });
    if (records.length >= count || Date.now() > deadline) return records;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
