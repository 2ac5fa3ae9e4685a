import type Database from 'libsql';
import { type BackoffPolicy, nextDelayMs } from '../backoff.js';
import { checkpointNow } from '../usage/sqlite-db.js';
import {
  type DeliveryRecord,
  isTerminal,
  type ListQuery,
  type NewDelivery,
  type PredictionPatch,
  type PredictionRecord,
  type PredictionStatus,
  type PredictionStore,
  type StreamEvent,
} from './types.js';

type Db = InstanceType<typeof Database>;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS predictions (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL,
  model TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  completed_at INTEGER,
  data_removed INTEGER NOT NULL DEFAULT 0,
  record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS predictions_by_account ON predictions (account_id, created_at DESC);
CREATE INDEX IF NOT EXISTS predictions_by_account_model ON predictions (account_id, model, created_at DESC);
CREATE INDEX IF NOT EXISTS predictions_unfinished ON predictions (status) WHERE status IN ('starting', 'processing');
CREATE INDEX IF NOT EXISTS predictions_purge ON predictions (completed_at) WHERE data_removed = 0;
CREATE TABLE IF NOT EXISTS prediction_idempotency (
  account_id TEXT NOT NULL,
  key TEXT NOT NULL,
  prediction_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (account_id, key)
);
CREATE TABLE IF NOT EXISTS prediction_stream_events (
  prediction_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  event TEXT NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (prediction_id, seq)
);
CREATE TABLE IF NOT EXISTS webhook_deliveries (
  id TEXT PRIMARY KEY,
  prediction_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  state TEXT NOT NULL,
  next_attempt_at INTEGER,
  record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS deliveries_by_prediction ON webhook_deliveries (prediction_id, seq);
CREATE INDEX IF NOT EXISTS deliveries_pending ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
`;

const IDEMPOTENCY_MS = 24 * 60 * 60 * 1000;
/**
 * Removed sealed secrets are checkpointed out of the write-ahead log within baseMs (README, Shutdown);
 * maxMs is the longest wait between two tries while a reader keeps the log from being emptied.
 */
const SCRUB: BackoffPolicy = { baseMs: 200, maxMs: 5_000, jitter: 'none' };

interface RecordRow {
  record: string;
}

/**
 * Predictions in the embedded SQLite file. The whole record is one JSON column (read and written whole,
 * like the Redis store); the columns beside it exist for the indexes that list, recovery and purge use.
 * libsql is synchronous: every method is one or a few indexed statements, well under a millisecond.
 */
export class SqlitePredictionStore implements PredictionStore {
  private readonly stmt;
  private scrubTimer: NodeJS.Timeout | undefined;

  constructor(private readonly db: Db) {
    // Deleted or rewritten content is overwritten with zeros, so a removed sealed secret leaves no copy
    // in the page; scrubSoon() then moves that page over the old one in gantry.db and empties the log.
    db.exec('PRAGMA secure_delete = ON;');
    db.exec(SCHEMA);
    this.stmt = {
      insert: db.prepare(
        `INSERT INTO predictions (id, account_id, model, status, created_at, completed_at, data_removed, record)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
      ),
      get: db.prepare('SELECT record FROM predictions WHERE id = ?'),
      write: db.prepare(
        'UPDATE predictions SET status = ?, completed_at = ?, data_removed = ?, record = ? WHERE id = ?',
      ),
      idempotencyGet: db.prepare(
        'SELECT prediction_id, created_at FROM prediction_idempotency WHERE account_id = ? AND key = ?',
      ),
      idempotencyPut: db.prepare(
        `INSERT OR REPLACE INTO prediction_idempotency (account_id, key, prediction_id, created_at)
         VALUES (?, ?, ?, ?)`,
      ),
      delete: db.prepare('DELETE FROM predictions WHERE id = ?'),
      deleteEvents: db.prepare('DELETE FROM prediction_stream_events WHERE prediction_id = ?'),
      deleteDeliveries: db.prepare('DELETE FROM webhook_deliveries WHERE prediction_id = ?'),
      deleteIdempotency: db.prepare('DELETE FROM prediction_idempotency WHERE prediction_id = ?'),
      unfinished: db.prepare(
        `SELECT id FROM predictions WHERE status IN ('starting', 'processing') ORDER BY created_at LIMIT ?`,
      ),
      dueForPurge: db.prepare(
        `SELECT id FROM predictions WHERE data_removed = 0 AND completed_at IS NOT NULL AND completed_at < ?
         ORDER BY completed_at LIMIT ?`,
      ),
      lastEventSeq: db.prepare(
        'SELECT COALESCE(MAX(seq), 0) AS seq FROM prediction_stream_events WHERE prediction_id = ?',
      ),
      insertEvent: db.prepare(
        'INSERT INTO prediction_stream_events (prediction_id, seq, event, data) VALUES (?, ?, ?, ?)',
      ),
      events: db.prepare(
        'SELECT seq, event, data FROM prediction_stream_events WHERE prediction_id = ? AND seq > ? ORDER BY seq',
      ),
      lastDeliverySeq: db.prepare(
        'SELECT COALESCE(MAX(seq), 0) AS seq FROM webhook_deliveries WHERE prediction_id = ?',
      ),
      insertDelivery: db.prepare(
        `INSERT INTO webhook_deliveries (id, prediction_id, seq, state, next_attempt_at, record)
         VALUES (?, ?, ?, ?, ?, ?)`,
      ),
      getDelivery: db.prepare('SELECT record FROM webhook_deliveries WHERE id = ?'),
      writeDelivery: db.prepare(
        'UPDATE webhook_deliveries SET state = ?, next_attempt_at = ?, record = ? WHERE id = ?',
      ),
      deliveries: db.prepare('SELECT record FROM webhook_deliveries WHERE prediction_id = ? ORDER BY seq'),
      pendingDeliveries: db.prepare(
        `SELECT id FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= ?
         ORDER BY next_attempt_at LIMIT ?`,
      ),
    };
  }

  async create(record: PredictionRecord, idempotencyKey?: string) {
    return this.transaction(() => {
      if (idempotencyKey !== undefined) {
        const seen = this.stmt.idempotencyGet.get(record.accountId, idempotencyKey) as
          | { prediction_id: string; created_at: number }
          | undefined;
        if (seen && seen.created_at > Date.now() - IDEMPOTENCY_MS) {
          const existing = this.read(seen.prediction_id);
          if (existing) return { record: existing, created: false };
        }
        this.stmt.idempotencyPut.run(record.accountId, idempotencyKey, record.id, Date.now());
      }
      this.stmt.insert.run(
        record.id,
        record.accountId,
        record.model,
        record.status,
        record.createdAt,
        record.completedAt,
        record.dataRemoved ? 1 : 0,
        JSON.stringify(record),
      );
      return { record, created: true };
    });
  }

  async findByIdempotencyKey(accountId: string, key: string) {
    const seen = this.stmt.idempotencyGet.get(accountId, key) as
      | { prediction_id: string; created_at: number }
      | undefined;
    if (!seen || seen.created_at <= Date.now() - IDEMPOTENCY_MS) return undefined;
    return this.read(seen.prediction_id);
  }

  async get(id: string) {
    return this.read(id);
  }

  async update(
    id: string,
    patch: PredictionPatch,
    from?: readonly PredictionStatus[],
    outbox: readonly NewDelivery[] = [],
  ) {
    return this.transaction(() => {
      const current = this.read(id);
      if (!current) return undefined;
      if (from ? !from.includes(current.status) : isTerminal(current.status)) return undefined;
      const next: PredictionRecord = { ...current, ...patch, updatedAt: Date.now() };
      this.stmt.write.run(next.status, next.completedAt, next.dataRemoved ? 1 : 0, JSON.stringify(next), id);
      for (const delivery of outbox) this.insertDelivery({ ...delivery, predictionId: id });
      if (current.sealedSecrets !== null && next.sealedSecrets === null) this.scrubSoon();
      return next;
    });
  }

  async list(query: ListQuery) {
    const where = ['account_id = ?'];
    const args: Array<string | number> = [query.accountId];
    if (query.model !== undefined) {
      where.push('model = ?');
      args.push(query.model);
    }
    if (query.from !== undefined) {
      where.push('created_at >= ?');
      args.push(query.from);
    }
    if (query.to !== undefined) {
      where.push('created_at < ?');
      args.push(query.to);
    }
    const clause = where.join(' AND ');
    const { n } = this.db.prepare(`SELECT COUNT(*) AS n FROM predictions WHERE ${clause}`).get(...args) as {
      n: number;
    };
    const rows = this.db
      .prepare(
        `SELECT record FROM predictions WHERE ${clause} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?`,
      )
      .all(...args, query.limit, query.offset) as RecordRow[];
    return { records: rows.map((r) => JSON.parse(r.record) as PredictionRecord), total: n };
  }

  async delete(id: string) {
    return this.transaction(() => {
      const removed = this.stmt.delete.run(id).changes > 0;
      this.stmt.deleteEvents.run(id);
      this.stmt.deleteDeliveries.run(id);
      this.stmt.deleteIdempotency.run(id);
      if (removed) this.scrubSoon();
      return removed;
    });
  }

  async abandon(id: string) {
    // Writes here are synchronous: a create either happened or never will; delete frees its key.
    await this.delete(id);
  }

  async unfinished(limit: number) {
    return (this.stmt.unfinished.all(limit) as Array<{ id: string }>).map((r) => r.id);
  }

  async dueForPurge(before: number, limit: number) {
    return (this.stmt.dueForPurge.all(before, limit) as Array<{ id: string }>).map((r) => r.id);
  }

  async appendStreamEvent(predictionId: string, event: Omit<StreamEvent, 'seq'>) {
    return this.transaction(() => {
      // A deleted prediction keeps nothing (as on Redis): seq 0 says the event was not stored.
      if (!this.stmt.get.get(predictionId)) return { seq: 0, event: event.event, data: event.data };
      const { seq } = this.stmt.lastEventSeq.get(predictionId) as { seq: number };
      const stored: StreamEvent = { seq: seq + 1, event: event.event, data: event.data };
      this.stmt.insertEvent.run(predictionId, stored.seq, stored.event, stored.data);
      return stored;
    });
  }

  async streamEvents(predictionId: string, afterSeq: number) {
    return this.stmt.events.all(predictionId, afterSeq) as unknown as StreamEvent[];
  }

  async addDelivery(delivery: Omit<DeliveryRecord, 'seq'>) {
    return this.transaction(() => this.insertDelivery(delivery));
  }

  /** Inside a transaction: the delivery with the next seq of its prediction. */
  private insertDelivery(delivery: Omit<DeliveryRecord, 'seq'>): DeliveryRecord {
    const { seq } = this.stmt.lastDeliverySeq.get(delivery.predictionId) as { seq: number };
    const stored: DeliveryRecord = { ...delivery, seq: seq + 1 };
    this.stmt.insertDelivery.run(
      stored.id,
      stored.predictionId,
      stored.seq,
      stored.state,
      stored.nextAttemptAt,
      JSON.stringify(stored),
    );
    return stored;
  }

  async getDelivery(id: string) {
    const row = this.stmt.getDelivery.get(id) as RecordRow | undefined;
    return row ? (JSON.parse(row.record) as DeliveryRecord) : undefined;
  }

  async updateDelivery(
    id: string,
    patch: Partial<Pick<DeliveryRecord, 'state' | 'attempts' | 'nextAttemptAt' | 'log'>>,
  ) {
    this.transaction(() => {
      const row = this.stmt.getDelivery.get(id) as RecordRow | undefined;
      if (!row) return;
      const next: DeliveryRecord = { ...(JSON.parse(row.record) as DeliveryRecord), ...patch };
      this.stmt.writeDelivery.run(next.state, next.nextAttemptAt, JSON.stringify(next), id);
    });
  }

  async deliveries(predictionId: string) {
    return (this.stmt.deliveries.all(predictionId) as RecordRow[]).map(
      (r) => JSON.parse(r.record) as DeliveryRecord,
    );
  }

  async pendingDeliveries(before: number, limit: number) {
    return (this.stmt.pendingDeliveries.all(before, limit) as Array<{ id: string }>).map((r) => r.id);
  }

  async close() {
    // The database handle belongs to the SqliteStore that opened it (it checkpoints when it closes).
    clearTimeout(this.scrubTimer);
  }

  /**
   * One checkpoint for the secrets removed within SCRUB.baseMs, off the request that removed them. It
   * never waits for a reader (that would hold the event loop): while one is in the way, it tries again,
   * less and less often, until the log is empty.
   */
  private scrubSoon(attempt = 1): void {
    if (this.scrubTimer !== undefined) return;
    this.scrubTimer = setTimeout(
      () => {
        this.scrubTimer = undefined;
        if (!checkpointNow(this.db)) this.scrubSoon(attempt + 1);
      },
      nextDelayMs(attempt, SCRUB),
    );
    this.scrubTimer.unref();
  }

  private read(id: string): PredictionRecord | undefined {
    const row = this.stmt.get.get(id) as RecordRow | undefined;
    return row ? (JSON.parse(row.record) as PredictionRecord) : undefined;
  }

  private transaction<T>(work: () => T): T {
    this.db.exec('BEGIN IMMEDIATE');
    try {
      const result = work();
      this.db.exec('COMMIT');
      return result;
    } catch (error) {
      this.db.exec('ROLLBACK');
      throw error;
    }
  }
}
