import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newUsageId } from '../../src/usage/id.js';
import type { UsageRecord } from '../../src/usage/record.js';

let n = 0;

/** A valid record; every few records exercise the nullable fields. */
export function makeRecord(overrides: Partial<UsageRecord> = {}): UsageRecord {
  n += 1;
  const odd = n % 2 === 1;
  return {
    id: newUsageId(),
    time: new Date().toISOString(),
    account_id: 'acct-a',
    key_id: 'key-1',
    model: 'gpt-test',
    provider: 'fake-openai',
    api: odd ? 'chat' : 'embeddings',
    outcome: odd ? 'ok' : 'error',
    status: odd ? 200 : 502,
    error_id: odd ? null : 'UPSTREAM_ERROR',
    input_tokens: 10 + n,
    cached_input_tokens: odd ? 4 : 0,
    cache_write_input_tokens: n % 3 === 1 ? 3 : 0,
    output_tokens: odd ? 20 : 0,
    media_units: n % 3 === 0 ? { unit: 'image', quantity: 2.5 } : null,
    cost: 0.000123 * n,
    currency: 'USD',
    credits: 0.1 + n / 1000,
    latency_ms: 12.5,
    ttft_ms: odd ? 3.25 : null,
    stream: odd,
    safety_flags: [],
    safety_action: null,
    ...overrides,
  };
}

export function makeRecords(count: number, overrides: Partial<UsageRecord> = {}): UsageRecord[] {
  return Array.from({ length: count }, () => makeRecord(overrides));
}

export function tempDir(): { dir: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-usage-'));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export function byId(records: readonly UsageRecord[]): UsageRecord[] {
  return [...records].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}
