import type Database from 'libsql';
import { DEFAULT_LIST_LIMIT, type HistoryQuery, type StatusChange, type StatusHistory } from './history.js';

type Db = InstanceType<typeof Database>;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS status_history (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at INTEGER NOT NULL,
  model TEXT NOT NULL,
  deployment TEXT,
  from_status TEXT NOT NULL,
  to_status TEXT NOT NULL,
  reason TEXT NOT NULL,
  instance TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS status_history_model ON status_history (model, id);
`;

interface Row {
  at: number;
  model: string;
  deployment: string | null;
  from_status: string;
  to_status: string;
  reason: string;
  instance: string;
}

/** The embedded mode's status history: a table of the SQLite store, the newest `maxEntries` kept. */
export class SqliteStatusHistory implements StatusHistory {
  private readonly insert;
  private readonly trim;
  private readonly all;
  private readonly byModel;

  constructor(
    db: Db,
    private readonly maxEntries: number,
  ) {
    db.exec(SCHEMA);
    this.insert = db.prepare(
      `INSERT INTO status_history (at, model, deployment, from_status, to_status, reason, instance)
       VALUES (?, ?, ?, ?, ?, ?, ?)`,
    );
    this.trim = db.prepare('DELETE FROM status_history WHERE id <= (SELECT MAX(id) FROM status_history) - ?');
    this.all = db.prepare('SELECT * FROM status_history WHERE at >= ? ORDER BY id DESC LIMIT ?');
    this.byModel = db.prepare(
      'SELECT * FROM status_history WHERE model = ? AND at >= ? ORDER BY id DESC LIMIT ?',
    );
  }

  async record(c: StatusChange): Promise<void> {
    this.insert.run(c.at, c.model, c.deployment ?? null, c.from, c.to, c.reason, c.instance);
    this.trim.run(this.maxEntries);
  }

  async list(query: HistoryQuery = {}): Promise<StatusChange[]> {
    const since = query.since ?? 0;
    const limit = query.limit ?? DEFAULT_LIST_LIMIT;
    const rows = (
      query.model === undefined ? this.all.all(since, limit) : this.byModel.all(query.model, since, limit)
    ) as Row[];
    return rows.map((r) => ({
      at: r.at,
      model: r.model,
      deployment: r.deployment ?? undefined,
      from: r.from_status,
      to: r.to_status,
      reason: r.reason,
      instance: r.instance,
    }));
  }

  async close(): Promise<void> {}
}
