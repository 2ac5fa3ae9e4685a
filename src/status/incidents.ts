/**
 * Incidents (README, "Status page"): opened and resolved automatically from model status changes, and by
 * hand through the admin API; shown on the status page and its feed, and mailed to subscribers.
 *
 * STUB: replaced by the SQLite and Redis implementations.
 */
import type { PlaneDeps } from '../admin/plane.js';

export type IncidentStatus = 'investigating' | 'identified' | 'monitoring' | 'resolved';

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
  impact: 'degraded' | 'offline' | 'maintenance';
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

export interface Incidents {
  list(query: { since?: number; limit?: number; open?: boolean }): Promise<Incident[]>;
  get(id: string): Promise<Incident | undefined>;
  /** Called once per event, on the instance that made the change. */
  onEvent(listener: (event: IncidentEvent) => void): void;
  close(): Promise<void>;
}

export function createIncidents(_deps: PlaneDeps): Incidents {
  return {
    list: async () => [],
    get: async () => undefined,
    onEvent: () => {},
    close: async () => {},
  };
}
