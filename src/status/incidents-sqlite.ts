import type Database from 'libsql';
import { DEFAULT_INCIDENT_LIMIT, type IncidentStore, MAX_INCIDENT_LIMIT } from './incident-store.js';
import type { Incident, IncidentImpact, IncidentUpdate } from './incidents.js';

type Db = InstanceType<typeof Database>;

// At most one open automatic incident per component: the partial unique index holds it even when several
// processes share the database file.
const SCHEMA = `
CREATE TABLE IF NOT EXISTS incidents (
  id TEXT PRIMARY KEY,
  title TEXT NOT NULL,
  components TEXT NOT NULL,
  impact TEXT NOT NULL,
  status TEXT NOT NULL,
  source TEXT NOT NULL,
  opened_at INTEGER NOT NULL,
  resolved_at INTEGER,
  auto_component TEXT,
  updates TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS incidents_open_auto ON incidents (auto_component)
  WHERE resolved_at IS NULL AND auto_component IS NOT NULL;
CREATE INDEX IF NOT EXISTS incidents_opened ON incidents (opened_at);
`;

interface Row {
  id: string;
  title: string;
  components: string;
  impact: string;
  status: string;
  source: string;
  opened_at: number;
  resolved_at: number | null;
  updates: string;
}

function fromRow(r: Row): Incident {
  return {
    id: r.id,
    title: r.title,
    components: JSON.parse(r.components) as string[],
    impact: r.impact as Incident['impact'],
    status: r.status as Incident['status'],
    source: r.source as Incident['source'],
    openedAt: r.opened_at,
    resolvedAt: r.resolved_at,
    updates: JSON.parse(r.updates) as IncidentUpdate[],
  };
}

/** The embedded mode's incidents: a table of the SQLite store (each change one transaction). */
export class SqliteIncidentStore implements IncidentStore {
  readonly shared = false;
  private readonly insert;
  private readonly byId;
  private readonly autoOpen;
  private readonly listAll;
  private readonly listOpen;
  private readonly listSince;
  private readonly save;
  private readonly appendTx;

  constructor(db: Db) {
    db.exec(SCHEMA);
    this.insert = db.prepare(
      `INSERT INTO incidents (id, title, components, impact, status, source, opened_at, resolved_at, auto_component, updates)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
    );
    this.byId = db.prepare('SELECT * FROM incidents WHERE id = ?');
    this.autoOpen = db.prepare(
      'SELECT * FROM incidents WHERE auto_component = ? AND resolved_at IS NULL ORDER BY opened_at DESC LIMIT 1',
    );
    this.listAll = db.prepare('SELECT * FROM incidents ORDER BY opened_at DESC, id LIMIT ?');
    this.listOpen = db.prepare(
      'SELECT * FROM incidents WHERE resolved_at IS NULL ORDER BY opened_at DESC, id LIMIT ?',
    );
    this.listSince = db.prepare(
      'SELECT * FROM incidents WHERE resolved_at IS NULL OR resolved_at >= ? ORDER BY opened_at DESC, id LIMIT ?',
    );
    this.save = db.prepare(
      'UPDATE incidents SET status = ?, impact = ?, resolved_at = ?, updates = ? WHERE id = ?',
    );
    this.appendTx = db.transaction(
      (
        id: string,
        update: IncidentUpdate,
        impact: IncidentImpact | undefined,
        resolve: boolean,
        impactChangeOnly: boolean,
      ) => {
        const row = this.byId.get(id) as Row | undefined;
        if (row === undefined) return 'missing' as const;
        const incident = fromRow(row);
        if (incident.resolvedAt !== null) return 'resolved' as const;
        if (impactChangeOnly && impact === incident.impact) return 'unchanged' as const;
        incident.updates.push(update);
        incident.status = update.status;
        if (impact !== undefined) incident.impact = impact;
        if (resolve) incident.resolvedAt = update.at;
        this.save.run(
          incident.status,
          incident.impact,
          incident.resolvedAt,
          JSON.stringify(incident.updates),
          id,
        );
        return incident;
      },
    );
  }

  async create(incident: Incident, autoComponent: string | undefined): Promise<Incident | undefined> {
    const i = incident;
    const result = this.insert.run(
      i.id,
      i.title,
      JSON.stringify(i.components),
      i.impact,
      i.status,
      i.source,
      i.openedAt,
      i.resolvedAt,
      autoComponent ?? null,
      JSON.stringify(i.updates),
    );
    if (result.changes > 0 || autoComponent === undefined) return undefined;
    return this.openAutoOf(autoComponent);
  }

  async openAutoOf(component: string): Promise<Incident | undefined> {
    const row = this.autoOpen.get(component) as Row | undefined;
    return row === undefined ? undefined : fromRow(row);
  }

  async get(id: string): Promise<Incident | undefined> {
    const row = this.byId.get(id) as Row | undefined;
    return row === undefined ? undefined : fromRow(row);
  }

  async list(query: { since?: number; limit?: number; open?: boolean }): Promise<Incident[]> {
    const limit = Math.min(query.limit ?? DEFAULT_INCIDENT_LIMIT, MAX_INCIDENT_LIMIT);
    const rows = (
      query.open
        ? this.listOpen.all(limit)
        : query.since !== undefined
          ? this.listSince.all(query.since, limit)
          : this.listAll.all(limit)
    ) as Row[];
    return rows.map(fromRow);
  }

  async append(
    id: string,
    update: IncidentUpdate,
    impact?: IncidentImpact,
    impactChangeOnly = false,
  ): Promise<Incident | 'missing' | 'resolved' | 'unchanged'> {
    return this.appendTx(id, update, impact, false, impactChangeOnly);
  }

  async resolve(id: string, update: IncidentUpdate): Promise<Incident | 'missing' | 'resolved'> {
    return this.appendTx(id, update, undefined, true, false) as Incident | 'missing' | 'resolved';
  }

  async close(): Promise<void> {}
}
