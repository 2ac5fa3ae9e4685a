import type Database from 'libsql';
import { newSubscriberId, type PendingResult, type Subscriber, type SubscriberStore } from './subscribers.js';

type Db = InstanceType<typeof Database>;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS status_subscribers (
  id TEXT PRIMARY KEY,
  email TEXT NOT NULL UNIQUE,
  confirmed INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  confirmed_at INTEGER,
  confirm_hash TEXT UNIQUE,
  pending_until INTEGER
);
CREATE INDEX IF NOT EXISTS status_subscribers_pending ON status_subscribers (pending_until)
  WHERE confirmed = 0;
`;

interface Row {
  id: string;
  email: string;
  confirmed: number;
  created_at: number;
  confirmed_at: number | null;
  pending_until: number | null;
}

function fromRow(row: Row): Subscriber {
  return {
    id: row.id,
    email: row.email,
    confirmed: row.confirmed === 1,
    createdAt: row.created_at,
    confirmedAt: row.confirmed_at,
    pendingUntil: row.pending_until,
  };
}

/**
 * The embedded mode's subscribers: a table of the SQLite store. Rate-limit windows are counted in memory
 * (one process serves the embedded mode).
 */
export class SqliteSubscriberStore implements SubscriberStore {
  private readonly stmt;
  private readonly windows = new Map<string, { start: number; end: number; count: number }>();
  private readonly upsertTx;
  private readonly confirmTx;

  constructor(db: Db) {
    db.exec(SCHEMA);
    this.stmt = {
      byEmail: db.prepare('SELECT * FROM status_subscribers WHERE email = ?'),
      byId: db.prepare('SELECT * FROM status_subscribers WHERE id = ?'),
      byHash: db.prepare(
        'SELECT * FROM status_subscribers WHERE confirm_hash = ? AND confirmed = 0 AND pending_until > ?',
      ),
      insert: db.prepare(
        `INSERT INTO status_subscribers (id, email, confirmed, created_at, confirm_hash, pending_until)
         VALUES (?, ?, 0, ?, ?, ?)`,
      ),
      renew: db.prepare('UPDATE status_subscribers SET confirm_hash = ?, pending_until = ? WHERE id = ?'),
      confirm: db.prepare(
        `UPDATE status_subscribers SET confirmed = 1, confirmed_at = ?, confirm_hash = NULL, pending_until = NULL
         WHERE id = ?`,
      ),
      remove: db.prepare('DELETE FROM status_subscribers WHERE id = ?'),
      confirmed: db.prepare('SELECT * FROM status_subscribers WHERE confirmed = 1 ORDER BY created_at, id'),
      purge: db.prepare('DELETE FROM status_subscribers WHERE confirmed = 0 AND pending_until <= ?'),
    };
    this.upsertTx = db.transaction(
      (email: string, hash: string, pendingUntil: number, now: number): PendingResult => {
        const row = this.stmt.byEmail.get(email) as Row | undefined;
        if (row?.confirmed === 1) return { id: row.id, state: 'confirmed' };
        if (row) {
          this.stmt.renew.run(hash, pendingUntil, row.id);
          return { id: row.id, state: 'pending' };
        }
        const id = newSubscriberId();
        this.stmt.insert.run(id, email, now, hash, pendingUntil);
        return { id, state: 'pending' };
      },
    );
    this.confirmTx = db.transaction((hash: string, now: number): Subscriber | undefined => {
      const row = this.stmt.byHash.get(hash, now) as Row | undefined;
      if (!row) return undefined;
      this.stmt.confirm.run(now, row.id);
      return fromRow(this.stmt.byId.get(row.id) as Row);
    });
  }

  async upsertPending(email: string, confirmHash: string, pendingUntil: number, now: number) {
    return this.upsertTx(email, confirmHash, pendingUntil, now);
  }

  async findPending(confirmHash: string, now: number) {
    const row = this.stmt.byHash.get(confirmHash, now) as Row | undefined;
    return row ? fromRow(row) : undefined;
  }

  async confirm(confirmHash: string, now: number) {
    return this.confirmTx(confirmHash, now);
  }

  async get(id: string) {
    const row = this.stmt.byId.get(id) as Row | undefined;
    return row ? fromRow(row) : undefined;
  }

  async remove(id: string) {
    return this.stmt.remove.run(id).changes > 0;
  }

  async listConfirmed() {
    return (this.stmt.confirmed.all() as Row[]).map(fromRow);
  }

  async purgeExpired(now: number) {
    this.stmt.purge.run(now);
    for (const [key, w] of this.windows) if (w.end <= now) this.windows.delete(key);
  }

  async hit(bucket: string, windowMs: number, now: number) {
    const start = now - (now % windowMs);
    const key = `${bucket}\0${windowMs}`;
    const w = this.windows.get(key);
    if (!w || w.start !== start) {
      this.windows.set(key, { start, end: start + windowMs, count: 1 });
      return 1;
    }
    w.count += 1;
    return w.count;
  }

  async close() {}
}
