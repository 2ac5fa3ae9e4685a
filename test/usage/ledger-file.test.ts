/**
 * The ledger file (src/usage/ledger-file.ts): data/ledger.db beside data/gantry.db, the one-time move of
 * the usage and credit tables an older Gantry kept in the store file, and a running Gantry on a file
 * store writing its usage and debits there through the ledger thread.
 */
import { copyFileSync, existsSync, mkdirSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Worker } from 'node:worker_threads';
import Database from 'libsql';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { syncAccounts } from '../../src/bootstrap.js';
import { parseConfig } from '../../src/config/load.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { fromMicros } from '../../src/usage/credits.js';
import { SqliteCreditStore } from '../../src/usage/credits-sqlite.js';
import { newUsageId } from '../../src/usage/id.js';
import { ledgerPathFor, moveLedgerTables, openLedgerFile } from '../../src/usage/ledger-file.js';
import type { UsageRecord } from '../../src/usage/record.js';
import type { SqliteDatabase } from '../../src/usage/sqlite-db.js';
import { SqliteUsageSink, USAGE_COLUMNS, USAGE_SCHEMA } from '../../src/usage/sqlite-sink.js';
import { addKey } from '../helpers/gantry.js';
import { byId, makeRecord, makeRecords, tempDir } from './fixtures.js';

const LEDGER_TABLES = ['usage_records', 'credit_balances', 'credit_ledger'];

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function dataDir(): string {
  const tmp = tempDir();
  cleanups.push(tmp.remove);
  return join(tmp.dir, 'data');
}

/** Tables and indexes of the ledger in a database file's schema. */
function ledgerObjects(db: SqliteDatabase): string[] {
  return (
    db
      .prepare(
        `SELECT name FROM sqlite_master WHERE name LIKE 'usage_records%' OR name LIKE 'credit_%' ORDER BY name`,
      )
      .all() as Array<{ name: string }>
  ).map((r) => r.name);
}

/** Everything the ledger tables hold, row by row, in storage order (credit movements by id). */
function snapshot(db: SqliteDatabase) {
  return {
    usage: db.prepare('SELECT * FROM usage_records ORDER BY id').all(),
    balances: db.prepare('SELECT * FROM credit_balances ORDER BY account_id').all(),
    movements: db.prepare('SELECT * FROM credit_ledger ORDER BY id').all() as Array<Record<string, unknown>>,
  };
}

/** The ledger's per-day totals (src/usage/sqlite-daily.ts), in key order. */
function dailyOf(db: SqliteDatabase): unknown[] {
  return db.prepare('SELECT * FROM usage_daily ORDER BY day, account_id, model').all();
}

/** What the per-day totals of `records` must be: each record counted once, credits in micro-credits. */
function sumsOf(records: readonly UsageRecord[]): unknown[] {
  const days = new Map<string, Record<string, string | number>>();
  for (const r of records) {
    const key = `${r.time.slice(0, 10)}\t${r.account_id}\t${r.model}`;
    const day = days.get(key) ?? {
      day: r.time.slice(0, 10),
      account_id: r.account_id,
      model: r.model,
      requests: 0,
      input_tokens: 0,
      output_tokens: 0,
      credits_micros: 0,
    };
    (day.requests as number) += 1;
    (day.input_tokens as number) += r.input_tokens;
    (day.output_tokens as number) += r.output_tokens;
    (day.credits_micros as number) += Math.round(r.credits * 1_000_000);
    days.set(key, day);
  }
  return [...days.keys()].sort().map((key) => days.get(key));
}

/** The movements without their integer id (the ledger file numbers them itself). */
function withoutIds(rows: Array<Record<string, unknown>>) {
  return rows.map(({ id: _id, ...rest }) => rest);
}

interface OldStore {
  path: string;
  records: UsageRecord[];
  debitedIds: string[];
  before: ReturnType<typeof snapshot>;
}

/** A gantry.db as an earlier Gantry left it: usage records and credits in the store file itself. */
function oldStore(dir: string): OldStore {
  const path = join(dir, 'gantry.db');
  const store = new SqliteStore(path);
  store.upsertAccount('acme', 'default', 'active');
  const usage = new SqliteUsageSink(store.handle);
  const credits = new SqliteCreditStore(store.handle, { defaultBalance: 0 });
  const records = [
    ...makeRecords(120),
    ...makeRecords(30, { account_id: 'acct-b' }),
    makeRecord({ time: '2024-06-01T00:00:00.000Z' }),
  ];
  usage.writeNow(records.slice(0, 100));
  usage.writeNow(records.slice(100));
  credits.grant('acct-a', 100, 'welcome');
  credits.grant('acct-b', 20, 'trial');
  const debitedIds: string[] = [];
  for (const r of records) {
    credits.debit(r.account_id, r.credits, r.id);
    debitedIds.push(r.id);
  }
  credits.grant('acct-a', -5, 'correction');
  credits.debit('acct-c', 1.5, newUsageId());
  const before = snapshot(store.handle);
  // The old Gantry stopped; the new one opens the same file.
  credits.close();
  store.close();
  return { path, records, debitedIds, before };
}

describe('the ledger file', () => {
  it('lives beside the store file; an in-memory store has none', () => {
    expect(ledgerPathFor('/srv/gantry/data/gantry.db')).toBe('/srv/gantry/data/ledger.db');
    expect(ledgerPathFor(':memory:')).toBeUndefined();
  });

  it('a fresh data dir moves nothing: the ledger file starts empty and the store file never gets the tables', () => {
    const dir = dataDir();
    const store = new SqliteStore(join(dir, 'gantry.db'));
    cleanups.push(() => store.close());
    const path = ledgerPathFor(store.path) as string;
    expect(existsSync(path)).toBe(false);
    const db = openLedgerFile(path, store.handle);
    cleanups.push(() => db.close());
    expect(existsSync(path)).toBe(true);
    expect(snapshot(db)).toEqual({ usage: [], balances: [], movements: [] });
    expect(ledgerObjects(db)).toEqual(expect.arrayContaining(LEDGER_TABLES));
    expect(ledgerObjects(store.handle)).toEqual([]);
    expect(moveLedgerTables(store.handle, path)).toBe(0);
  });

  it("moves an older store's records, balances and movements into the ledger file, once", () => {
    const dir = dataDir();
    const old = oldStore(dir);
    expect(old.before.usage).toHaveLength(151);
    expect(old.before.movements).toHaveLength(3 + 151 + 1);

    const store = new SqliteStore(old.path);
    cleanups.push(() => store.close());
    const path = ledgerPathFor(old.path) as string;
    let db = openLedgerFile(path, store.handle);

    // Every row, value for value; the movements in their order, with their kinds, notes and record ids.
    const after = snapshot(db);
    expect(after.usage).toEqual(old.before.usage);
    expect(after.balances).toEqual(old.before.balances);
    expect(withoutIds(after.movements)).toEqual(withoutIds(old.before.movements));
    expect(after.movements.map((m) => m.id)).toEqual(after.movements.map((_, i) => i + 1));
    // The records moved count in the usage queries' totals, each once.
    expect(dailyOf(db)).toEqual(sumsOf(old.records));
    const usage = new SqliteUsageSink(db);
    expect(byId(usage.list({ accountId: 'acct-a' }))).toEqual(
      byId(old.records.filter((r) => r.account_id === 'acct-a')),
    );
    const credits = new SqliteCreditStore(db, { defaultBalance: 0 });
    const spentA = old.records.filter((r) => r.account_id === 'acct-a').reduce((s, r) => s + r.credits, 0);
    expect(credits.balance('acct-a')).toBeCloseTo(95 - spentA, 6);
    expect(credits.balance('acct-c')).toBe(-1.5);
    const movesA = credits.ledger('acct-a');
    expect(movesA[0]).toMatchObject({ kind: 'grant', credits: 100, note: 'welcome', recordId: null });
    expect(movesA.at(-1)).toMatchObject({ kind: 'grant', credits: -5, note: 'correction' });
    expect(movesA.filter((m) => m.kind === 'debit').map((m) => m.recordId)).toEqual(
      old.debitedIds.filter((id) => old.records.find((r) => r.id === id)?.account_id === 'acct-a'),
    );

    // Gone from the store file, indexes included; the store's own tables stay.
    expect(ledgerObjects(store.handle)).toEqual([]);
    expect(store.getAccountByName('acme')).toBeDefined();

    // A second open (the next start) moves nothing and changes nothing.
    db.close();
    db = openLedgerFile(path, store.handle);
    cleanups.push(() => db.close());
    expect(snapshot(db)).toEqual(after);
    expect(moveLedgerTables(store.handle, path)).toBe(0);
    expect(ledgerObjects(store.handle)).toEqual([]);

    // Idempotency by id survived the move: re-debiting or re-writing a migrated record is a no-op.
    const again = new SqliteCreditStore(db, { defaultBalance: 0 });
    const migrated = old.records[0] as UsageRecord;
    const balance = again.balance(migrated.account_id);
    expect(again.debit(migrated.account_id, migrated.credits, migrated.id)).toEqual({
      applied: false,
      balance,
    });
    new SqliteUsageSink(db).writeNow([migrated]);
    expect(snapshot(db)).toEqual(after);
    expect(dailyOf(db)).toEqual(sumsOf(old.records));
    // New movements are numbered after the migrated ones.
    again.debit('acct-a', 1, newUsageId());
    const last = snapshot(db).movements.at(-1);
    expect(last?.id).toBe(after.movements.length + 1);
    expect(fromMicros(Number(last?.amount_micros))).toBe(-1);
  });

  it('a move interrupted after the copy (the rows in both files) ends without a duplicate on the next start', () => {
    const dir = dataDir();
    const old = oldStore(dir);
    // The store file as the old Gantry left it (closed: the file and its WAL are the whole state).
    const saved = join(dir, 'saved');
    const files = ['', '-wal'].filter((suffix) => existsSync(`${old.path}${suffix}`));
    for (const suffix of files) copyFileSync(`${old.path}${suffix}`, `${saved}${suffix}`);
    let store = new SqliteStore(old.path);
    const path = ledgerPathFor(old.path) as string;
    let db = openLedgerFile(path, store.handle);
    const moved = snapshot(db);
    db.close();
    store.close();

    // The process died before the store file's drop reached the disk: the old tables are back.
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${old.path}${suffix}`, { force: true });
    for (const suffix of files) copyFileSync(`${saved}${suffix}`, `${old.path}${suffix}`);
    store = new SqliteStore(old.path);
    cleanups.push(() => store.close());
    expect(ledgerObjects(store.handle)).toEqual(expect.arrayContaining(LEDGER_TABLES));
    db = openLedgerFile(path, store.handle);
    cleanups.push(() => db.close());
    expect(snapshot(db)).toEqual(moved);
    expect(withoutIds(moved.movements)).toEqual(withoutIds(old.before.movements));
    // The second copy inserted nothing, so it added nothing to the totals.
    expect(dailyOf(db)).toEqual(sumsOf(old.records));
    expect(ledgerObjects(store.handle)).toEqual([]);
  });

  it('moves the tables all or nothing: a failure midway leaves the store file as it was', () => {
    const dir = dataDir();
    const old = oldStore(dir);
    const path = ledgerPathFor(old.path) as string;
    // A ledger file that refuses credit movements: the third table of the move fails.
    const blocker = new Database(path);
    blocker.exec(`CREATE TABLE credit_ledger (id INTEGER PRIMARY KEY, record_id TEXT UNIQUE, account_id TEXT NOT NULL,
      kind TEXT NOT NULL, amount_micros INTEGER NOT NULL, note TEXT, time TEXT NOT NULL);
      CREATE TRIGGER refuse BEFORE INSERT ON credit_ledger BEGIN SELECT RAISE(ABORT, 'refused'); END;`);

    const store = new SqliteStore(old.path);
    cleanups.push(() => store.close());
    expect(() => openLedgerFile(path, store.handle)).toThrow(/refused/);
    expect(ledgerObjects(store.handle)).toEqual(expect.arrayContaining(LEDGER_TABLES));
    expect(snapshot(store.handle)).toEqual(old.before);
    const ledger = new Database(path);
    expect(snapshot(ledger)).toEqual({ usage: [], balances: [], movements: [] });
    expect(dailyOf(ledger)).toEqual([]);

    // Once the cause is gone, the next start moves everything (the failed attempt left nothing attached).
    blocker.exec('DROP TRIGGER refuse');
    blocker.close();
    const db = openLedgerFile(path, store.handle);
    cleanups.push(() => db.close());
    expect(snapshot(db).usage).toEqual(old.before.usage);
    expect(withoutIds(snapshot(db).movements)).toEqual(withoutIds(old.before.movements));
    expect(dailyOf(db)).toEqual(sumsOf(old.records));
    expect(ledgerObjects(store.handle)).toEqual([]);
    ledger.close();
  });
});

const ONE_CREDIT_PER_TOKEN = '{ amount: 1000, currency: USD, unit: million_token }';

describe('a Gantry on a file store', () => {
  it('writes usage and debits to data/ledger.db through the ledger thread, and stops it on close', async () => {
    const dir = dataDir();
    const config = parseConfig(
      `
server: { data_dir: ${dir} }
providers:
  local: { kind: local }
credits: { default_balance: 0 }
usage: { flush_ms: 20 }
accounts: [{ name: acme }]
models:
  - namespace: gantry/local-chat
    name: Local chat
    type: text
    apis: [chat]
    billable: true
    pricing: ${ONE_CREDIT_PER_TOKEN}
    routes: [{ provider: local, model: local-chat }]
    defaults: { max_tokens: 20 }
`,
      'ledger-test.yaml',
      {},
    );
    const store = new SqliteStore(join(dir, 'gantry.db'));
    cleanups.push(() => store.close());
    syncAccounts(store, config);
    const key = addKey(store, 'acme');
    const accountId = store.getAccountByName('acme')?.id as string;
    const { app, gantry } = await buildApp(config, store, { logger: false, processMetrics: false });
    let closed = false;
    cleanups.push(() => (closed ? undefined : app.close()));
    await app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = app.server.address() as AddressInfo;
    const services = gantry.services;
    const worker = (services.credits as unknown as { thread: { worker: Worker | undefined } }).thread.worker;
    expect(worker?.threadId).toBeGreaterThan(0);

    expect(await services.credits.grant(accountId, 1000, 'welcome')).toBe(1000);
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });
    let spent = 0;
    for (const text of ['hello', 'how are you', 'bye']) {
      const completion = await client.chat.completions.create({
        model: 'gantry/local-chat',
        messages: [{ role: 'user', content: text }],
      });
      spent += (completion.usage?.prompt_tokens ?? 0) + (completion.usage?.completion_tokens ?? 0);
    }
    const stream = await client.chat.completions.create({
      model: 'gantry/local-chat',
      messages: [{ role: 'user', content: 'stream it' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    for await (const chunk of stream) {
      if (chunk.usage) spent += chunk.usage.prompt_tokens + chunk.usage.completion_tokens;
    }
    expect(spent).toBeGreaterThan(0);
    await services.usage.flush();

    // Read by a connection of our own: what is in the file, not in a cache.
    const ledger = new Database(join(dir, 'ledger.db'), { readonly: true });
    cleanups.push(() => ledger.close());
    const rows = ledger
      .prepare('SELECT id, account_id, model, credits, stream FROM usage_records ORDER BY time, id')
      .all() as Array<{ id: string; account_id: string; model: string; credits: number; stream: number }>;
    expect(rows).toHaveLength(4);
    expect(rows.every((r) => r.account_id === accountId && r.model === 'gantry/local-chat')).toBe(true);
    expect(rows.map((r) => r.stream)).toEqual([0, 0, 0, 1]);
    expect(rows.reduce((s, r) => s + r.credits, 0)).toBeCloseTo(spent, 6);
    const moves = ledger
      .prepare(
        'SELECT kind, record_id, amount_micros, note FROM credit_ledger WHERE account_id = ? ORDER BY id',
      )
      .all(accountId) as Array<{
      kind: string;
      record_id: string | null;
      amount_micros: number;
      note: string;
    }>;
    expect(moves[0]).toMatchObject({ kind: 'grant', record_id: null, note: 'welcome' });
    expect(moves.slice(1).map((m) => m.record_id)).toEqual(rows.map((r) => r.id));
    const { balance_micros } = ledger
      .prepare('SELECT balance_micros FROM credit_balances WHERE account_id = ?')
      .get(accountId) as { balance_micros: number };
    expect(fromMicros(balance_micros)).toBeCloseTo(1000 - spent, 6);
    expect(await services.balance(accountId)).toBeCloseTo(1000 - spent, 6);
    expect(ledgerObjects(store.handle)).toEqual([]);

    const started = Date.now();
    await app.close();
    closed = true;
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(worker?.threadId).toBe(-1);
  });
});

describe('a ledger written before cache_write_input_tokens and the safety fields', () => {
  const ADDED = ['cache_write_input_tokens', 'safety_flags', 'safety_action'];
  const FIRST_SCHEMA = USAGE_SCHEMA.replace(
    ",\n  cache_write_input_tokens INTEGER NOT NULL DEFAULT 0,\n  safety_flags TEXT NOT NULL DEFAULT '',\n  safety_action TEXT",
    '',
  );
  const FIRST_COLUMNS = USAGE_COLUMNS.filter((c) => !ADDED.includes(c));

  /** A usage table of the first schema holding one record, as an older Gantry wrote it. */
  function firstSchemaTable(db: SqliteDatabase, record: UsageRecord): void {
    for (const column of ADDED) expect(FIRST_SCHEMA).not.toContain(column);
    db.exec(FIRST_SCHEMA);
    const values = FIRST_COLUMNS.map((c) =>
      c === 'media_unit' || c === 'media_quantity'
        ? null
        : c === 'stream'
          ? Number(record.stream)
          : (record[c as keyof UsageRecord] as string | number | null),
    );
    db.prepare(
      `INSERT INTO usage_records (${FIRST_COLUMNS.join(', ')}) VALUES (${FIRST_COLUMNS.map(() => '?').join(', ')})`,
    ).run(values);
  }

  it('gets the columns on open: older rows read 0, no flags, no action; new rows keep theirs', async () => {
    const dir = dataDir();
    mkdirSync(dir, { recursive: true });
    const path = join(dir, 'ledger.db');
    const old = makeRecord({ media_units: null, cache_write_input_tokens: 0 });
    const raw = new Database(path);
    firstSchemaTable(raw, old);
    raw.close();

    const sink = new SqliteUsageSink(path);
    cleanups.push(() => sink.close());
    const fresh = makeRecord({
      account_id: old.account_id,
      cache_write_input_tokens: 7,
      safety_flags: ['jailbreak', 'violence'],
      safety_action: 'blocked',
    });
    sink.writeNow([fresh]);
    expect(byId(sink.list({ accountId: old.account_id }))).toEqual(byId([old, fresh]));
  });

  it("moves an older store's usage table without the columns into the ledger file", () => {
    const dir = dataDir();
    const store = new SqliteStore(join(dir, 'gantry.db'));
    cleanups.push(() => store.close());
    const old = makeRecord({ media_units: null, cache_write_input_tokens: 0 });
    firstSchemaTable(store.handle, old);
    const path = ledgerPathFor(store.path) as string;
    const db = openLedgerFile(path, store.handle);
    cleanups.push(() => db.close());
    expect(ledgerObjects(store.handle)).toEqual([]);
    const sink = new SqliteUsageSink(db);
    expect(sink.list({ accountId: old.account_id })).toEqual([old]);
  });
});
