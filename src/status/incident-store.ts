import type { Incident, IncidentImpact, IncidentUpdate } from './incidents.js';

/**
 * Where incidents are kept. Each change is atomic in the store, so two instances (or two operators)
 * racing on one incident never lose an update nor resolve it twice.
 */
export interface IncidentStore {
  /** True when other Gantry instances share this store (Redis): an instance then sees only its own traffic. */
  readonly shared: boolean;
  /**
   * Adds the incident. With `autoComponent`, only if no automatic incident of that component is open:
   * then that open one is answered and nothing is added.
   */
  create(incident: Incident, autoComponent: string | undefined): Promise<Incident | undefined>;
  openAutoOf(component: string): Promise<Incident | undefined>;
  get(id: string): Promise<Incident | undefined>;
  /** Newest opened first; `since`: open ones and those resolved at or after it. */
  list(query: { since?: number; limit?: number; open?: boolean }): Promise<Incident[]>;
  /**
   * Appends an update (and sets the status, and the impact if given) unless resolved. With
   * `impactChangeOnly`, nothing is appended (`unchanged`) when the incident already has that impact: the
   * instances following one automatic incident each see the same change, and it is news only once.
   */
  append(
    id: string,
    update: IncidentUpdate,
    impact?: IncidentImpact,
    impactChangeOnly?: boolean,
  ): Promise<Incident | 'missing' | 'resolved' | 'unchanged'>;
  /** Resolves it with this update (status `resolved`) unless resolved already. */
  resolve(id: string, update: IncidentUpdate): Promise<Incident | 'missing' | 'resolved'>;
  close(): Promise<void>;
}

export const DEFAULT_INCIDENT_LIMIT = 50;
export const MAX_INCIDENT_LIMIT = 500;
