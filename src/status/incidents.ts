/**
 * Incidents (README, "Status page"): opened and resolved automatically from model status changes, and by
 * hand through the admin API; shown on the status page and its feed, and mailed to subscribers. Kept in
 * the mode's store: SQLite in embedded mode (incidents-sqlite.ts), Redis in distributed mode
 * (incidents-redis.ts).
 */
import { randomBytes } from 'node:crypto';
import type { PlaneDeps } from '../admin/plane.js';
import { GantryError } from '../errors.js';
import { AutoIncidents } from './auto-incidents.js';
import type { IncidentStore } from './incident-store.js';
import { RedisIncidentStore } from './incidents-redis.js';
import { SqliteIncidentStore } from './incidents-sqlite.js';

export type IncidentStatus = 'investigating' | 'identified' | 'monitoring' | 'resolved';
export type IncidentImpact = 'degraded' | 'offline' | 'maintenance';

export const INCIDENT_STATUSES: readonly IncidentStatus[] = [
  'investigating',
  'identified',
  'monitoring',
  'resolved',
];
export const INCIDENT_IMPACTS: readonly IncidentImpact[] = ['degraded', 'offline', 'maintenance'];

export interface IncidentUpdate {
  at: number;
  status: IncidentStatus;
  message: string;
}

export interface Incident {
  id: string;
  title: string;
  /** Status page components: `api`, `console`, or a model's namespace. */
  components: string[];
  impact: IncidentImpact;
  status: IncidentStatus;
  /** `auto`: opened from a status change; `manual`: through the admin API. */
  source: 'auto' | 'manual';
  openedAt: number;
  resolvedAt: number | null;
  /** Oldest first; the first is the opening message. */
  updates: IncidentUpdate[];
}

export interface IncidentEvent {
  kind: 'opened' | 'updated' | 'resolved';
  incident: Incident;
}

export interface OpenInput {
  title: string;
  components: string[];
  impact: IncidentImpact;
  status?: Exclude<IncidentStatus, 'resolved'>;
  message: string;
}

export interface UpdateInput {
  status?: Exclude<IncidentStatus, 'resolved'>;
  message: string;
  /** Automatic incidents follow their model between degraded and offline. */
  impact?: IncidentImpact;
  /**
   * Only an impact change is news (automatic incidents): when the incident has this impact already (another
   * instance saw the same change first), nothing is appended and no event is emitted.
   */
  impactChangeOnly?: boolean;
}

export interface Incidents {
  /** Newest opened first. `since`: open ones, and those resolved at or after it. */
  list(query: { since?: number; limit?: number; open?: boolean }): Promise<Incident[]>;
  get(id: string): Promise<Incident | undefined>;
  /** A manual incident. */
  open(input: OpenInput): Promise<Incident>;
  /**
   * The automatic incident of one component: opened unless one is open already (on any instance), in
   * which case that one is answered with `opened: false`.
   */
  openAuto(component: string, input: OpenInput): Promise<{ incident: Incident; opened: boolean }>;
  /** The open automatic incident of a component, if any. */
  openAutoOf(component: string): Promise<Incident | undefined>;
  /** Appends an update. NOT_FOUND for an unknown id, CONFLICT once resolved. */
  update(id: string, input: UpdateInput): Promise<Incident>;
  /** Resolves it (an update with status `resolved`). NOT_FOUND for an unknown id, CONFLICT once resolved. */
  resolve(id: string, message?: string): Promise<Incident>;
  /** Called once per event, on the instance that made the change. */
  onEvent(listener: (event: IncidentEvent) => void): void;
  close(): Promise<void>;
}

export const RESOLVED_MESSAGE = 'This incident has been resolved.';

export function newIncidentId(): string {
  return `inc_${randomBytes(12).toString('base64url')}`;
}

/** Incidents over a store, with the listeners and (unless turned off) the automatic incidents. */
export class IncidentService implements Incidents {
  private readonly listeners: Array<(event: IncidentEvent) => void> = [];
  private auto: AutoIncidents | undefined;

  constructor(
    private readonly store: IncidentStore,
    private readonly log: PlaneDeps['log'],
    private readonly clock: () => number = Date.now,
  ) {}

  /** Whether model statuses are watched for automatic incidents. */
  get watching(): boolean {
    return this.auto !== undefined;
  }

  /** Starts watching model statuses (createIncidents does it unless `auto_incidents` is false). */
  watch(deps: PlaneDeps): void {
    this.auto = new AutoIncidents(this, deps, this.store.shared);
  }

  list(query: { since?: number; limit?: number; open?: boolean }): Promise<Incident[]> {
    return this.store.list(query);
  }

  get(id: string): Promise<Incident | undefined> {
    return this.store.get(id);
  }

  async open(input: OpenInput): Promise<Incident> {
    const incident = this.fresh(input, 'manual');
    await this.store.create(incident, undefined);
    this.emit('opened', incident);
    return incident;
  }

  async openAuto(component: string, input: OpenInput): Promise<{ incident: Incident; opened: boolean }> {
    const incident = this.fresh(input, 'auto');
    const existing = await this.store.create(incident, component);
    if (existing !== undefined) return { incident: existing, opened: false };
    this.emit('opened', incident);
    return { incident, opened: true };
  }

  openAutoOf(component: string): Promise<Incident | undefined> {
    return this.store.openAutoOf(component);
  }

  async update(id: string, input: UpdateInput): Promise<Incident> {
    const current = await this.existing(id);
    const update: IncidentUpdate = {
      at: this.clock(),
      status: input.status ?? current.status,
      message: input.message,
    };
    const done = await this.store.append(id, update, input.impact, input.impactChangeOnly === true);
    if (done === 'unchanged') return (await this.store.get(id)) ?? current;
    const incident = this.applied(id, done);
    this.emit('updated', incident);
    return incident;
  }

  async resolve(id: string, message?: string): Promise<Incident> {
    await this.existing(id);
    const update: IncidentUpdate = {
      at: this.clock(),
      status: 'resolved',
      message: message ?? RESOLVED_MESSAGE,
    };
    const incident = this.applied(id, await this.store.resolve(id, update));
    this.emit('resolved', incident);
    return incident;
  }

  onEvent(listener: (event: IncidentEvent) => void): void {
    this.listeners.push(listener);
  }

  async close(): Promise<void> {
    this.auto?.stop();
    await this.store.close();
  }

  private fresh(input: OpenInput, source: Incident['source']): Incident {
    const at = this.clock();
    const status = input.status ?? 'investigating';
    return {
      id: newIncidentId(),
      title: input.title,
      components: [...input.components],
      impact: input.impact,
      status,
      source,
      openedAt: at,
      resolvedAt: null,
      updates: [{ at, status, message: input.message }],
    };
  }

  private async existing(id: string): Promise<Incident> {
    const incident = await this.store.get(id);
    if (incident === undefined) throw notFound(id);
    if (incident.resolvedAt !== null) throw alreadyResolved(id);
    return incident;
  }

  /** The store's answer to a change: the incident, or why it was refused (a race with another caller). */
  private applied(id: string, done: Incident | 'missing' | 'resolved'): Incident {
    if (done === 'missing') throw notFound(id);
    if (done === 'resolved') throw alreadyResolved(id);
    return done;
  }

  private emit(kind: IncidentEvent['kind'], incident: Incident): void {
    for (const listener of this.listeners) {
      try {
        listener({ kind, incident });
      } catch (err) {
        this.log.warn({ err: (err as Error).message, incident: incident.id }, 'incident listener failed');
      }
    }
  }
}

function notFound(id: string): GantryError {
  return new GantryError('NOT_FOUND', { message: `Incident ${id} not found` });
}

function alreadyResolved(id: string): GantryError {
  return new GantryError('CONFLICT', { message: `Incident ${id} is already resolved` });
}

export function createIncidents(deps: PlaneDeps): IncidentService {
  const store: IncidentStore = deps.redis
    ? new RedisIncidentStore(deps.redis)
    : new SqliteIncidentStore(deps.store.handle);
  const service = new IncidentService(store, deps.log);
  if (deps.config.web.statusPage.autoIncidents) service.watch(deps);
  return service;
}
