/**
 * What keeping the per-day usage totals (src/usage/sqlite-daily.ts) costs the ledger thread, in-process,
 * so the figure does not move with the machine's load as the HTTP bench's do. Three ledger files on
 * /dev/shm (or the temp dir), written batch after batch, the ledgers taking turns batch by batch:
 *
 * - `records only`: the usage table and the sink's INSERT OR IGNORE statements, no daily totals: the floor;
 * - `per-record trigger`: the same plus the AFTER INSERT trigger that kept the totals before (its DDL is
 *   copied below), one upsert per record;
 * - `sink`: SqliteUsageSink.writeRows as built, the way the ledger thread writes a batch.
 *
 * Prints the median CPU µs per record of each (a batch's CPU time / its size) and the difference to the
 * floor.
 *
 * usage: node --import tsx bench/ledger-daily.ts [--batch 500] [--batches 200] [--rounds 3]
 *                                                [--accounts 4] [--models 2]
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { newUsageId } from '../src/usage/id.js';
import type { UsageRecord } from '../src/usage/record.js';
import { openDatabase, type SqliteDatabase } from '../src/usage/sqlite-db.js';
import {
  pushUsageRow,
  SqliteUsageSink,
  USAGE_COLUMNS,
  USAGE_SCHEMA,
  type UsageRowValues,
} from '../src/usage/sqlite-sink.js';

const { values: args } = parseArgs({
  options: {
    batch: { type: 'string', default: '500' },
    batches: { type: 'string', default: '200' },
    rounds: { type: 'string', default: '3' },
    accounts: { type: 'string', default: '4' },
    models: { type: 'string', default: '2' },
  },
});
const positive = (name: keyof typeof args): number => {
  const n = Number(args[name]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name}: a positive integer`);
  return n;
};
const batchSize = positive('batch');
const batches = positive('batches');
const rounds = positive('rounds');
const accounts = positive('accounts');
const models = positive('models');

/** The trigger that kept `usage_daily` before, as it was created then. */
const OLD_TRIGGER = `
CREATE TABLE IF NOT EXISTS usage_daily (
  day TEXT NOT NULL, account_id TEXT NOT NULL, model TEXT NOT NULL, requests INTEGER NOT NULL,
  input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, credits_micros INTEGER NOT NULL,
  PRIMARY KEY (day, account_id, model)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS usage_daily_account_day ON usage_daily (account_id, day);
CREATE TRIGGER IF NOT EXISTS usage_records_daily AFTER INSERT ON usage_records
BEGIN
  INSERT INTO usage_daily (day, account_id, model, requests, input_tokens, output_tokens, credits_micros)
  VALUES (substr(NEW.time, 1, 10), NEW.account_id, NEW.model, 1, NEW.input_tokens, NEW.output_tokens,
    CAST(round(NEW.credits * 1000000) AS INTEGER))
  ON CONFLICT (day, account_id, model) DO UPDATE SET
    requests = requests + 1,
    input_tokens = input_tokens + excluded.input_tokens,
    output_tokens = output_tokens + excluded.output_tokens,
    credits_micros = credits_micros + excluded.credits_micros;
END;
`;

/** The sink's way of inserting (50 rows a statement, then one by one), without anything else. */
function plainWriter(db: SqliteDatabase): (values: UsageRowValues) => void {
  db.exec(USAGE_SCHEMA);
  const row = `(${USAGE_COLUMNS.map(() => '?').join(', ')})`;
  const head = `INSERT OR IGNORE INTO usage_records (${USAGE_COLUMNS.join(', ')}) VALUES `;
  const one = db.prepare(head + row);
  const many = db.prepare(head + Array(50).fill(row).join(', '));
  const width = USAGE_COLUMNS.length;
  return db.transaction((values: UsageRowValues) => {
    const rows = values.length / width;
    let r = 0;
    for (; r + 50 <= rows; r += 50) many.run(values.slice(r * width, (r + 50) * width));
    for (; r < rows; r++) one.run(values.slice(r * width, (r + 1) * width));
  });
}

interface Ledger {
  name: string;
  write(values: UsageRowValues): void;
  db: SqliteDatabase;
  perRecordUs: number[];
}

const dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'gantry-ledger-daily-'));
const open = (name: string): SqliteDatabase => openDatabase(join(dir, `${name}.db`)).db;

function ledgers(): Ledger[] {
  const plain = open('plain');
  const trigger = open('trigger');
  const writeTrigger = plainWriter(trigger);
  trigger.exec(OLD_TRIGGER);
  const sinkDb = open('sink');
  const sink = new SqliteUsageSink(sinkDb);
  return [
    { name: 'records only', write: plainWriter(plain), db: plain, perRecordUs: [] },
    { name: 'per-record trigger', write: writeTrigger, db: trigger, perRecordUs: [] },
    { name: 'sink', write: (v) => sink.writeRows(v), db: sinkDb, perRecordUs: [] },
  ];
}

let n = 0;
/** A batch as the ledger thread receives it: one day, a few accounts and models, as the bench's load. */
function batchRows(): UsageRowValues {
  const values: UsageRowValues = [];
  const time = new Date().toISOString();
  for (let i = 0; i < batchSize; i++) {
    n += 1;
    const record: UsageRecord = {
      id: newUsageId(),
      time,
      account_id: `acct-${n % accounts}`,
      key_id: 'key-1',
      model: `bench/chat-${n % models}`,
      provider: 'openai',
      api: 'chat',
      outcome: 'ok',
      status: 200,
      error_id: null,
      input_tokens: 12,
      cached_input_tokens: 0,
      cache_write_input_tokens: 0,
      output_tokens: 9,
      media_units: null,
      cost: 0.000042,
      currency: 'USD',
      credits: 0.000042,
      latency_ms: 1.25,
      ttft_ms: null,
      stream: false,
      safety_flags: [],
      safety_action: null,
    };
    pushUsageRow(values, record);
  }
  return values;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? Number.NaN;
};

function main(): void {
  const all = ledgers();
  // Warm-up: statements prepared, pages allocated.
  for (const ledger of all) for (let i = 0; i < 20; i++) ledger.write(batchRows());
  for (let round = 0; round < rounds; round++) {
    for (let b = 0; b < batches; b++) {
      // Batch by batch, in rotating order, so a burst of machine noise hits every ledger alike.
      const pending = all.map(() => batchRows());
      for (let k = 0; k < all.length; k++) {
        const ledger = all[(b + k) % all.length] as Ledger;
        const values = pending[k] as UsageRowValues;
        // CPU time, not wall time: on a shared machine the wall clock also counts time descheduled.
        const start = process.cpuUsage();
        ledger.write(values);
        const used = process.cpuUsage(start);
        ledger.perRecordUs.push((used.user + used.system) / batchSize);
      }
    }
  }
  const floor = median((all[0] as Ledger).perRecordUs);
  console.log(
    `batches of ${batchSize} records, ${accounts} accounts x ${models} models, ${rounds} rounds x ${batches} batches per ledger`,
  );
  console.log('ledger                 CPU µs/record (median)   vs records only   p90');
  for (const ledger of all) {
    const m = median(ledger.perRecordUs);
    const sorted = [...ledger.perRecordUs].sort((a, b) => a - b);
    const p90 = sorted[Math.floor(sorted.length * 0.9)] ?? Number.NaN;
    console.log(
      `${ledger.name.padEnd(22)} ${m.toFixed(2).padStart(8)}             ${(m - floor >= 0 ? '+' : '') + (m - floor).toFixed(2).padStart(6)}          ${p90.toFixed(2)}`,
    );
  }
  for (const ledger of all) ledger.db.close();
  rmSync(dir, { recursive: true, force: true });
}

main();
