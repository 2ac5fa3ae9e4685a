/**
 * The status history: every status change of a model or of one of its deployments, with its time and
 * reason, kept in the mode's store (SQLite in embedded mode, a capped Redis stream in distributed mode).
 * Read through `list()` (a status page, the CLI); written off the request path, only on a change.
 */

export interface StatusChange {
  /** Milliseconds since the epoch. */
  at: number;
  /** The catalogue model. */
  model: string;
  /** `provider/upstream-model` for a deployment's change; undefined for the model's own status. */
  deployment: string | undefined;
  /** Model: operational, degraded, offline. Deployment: closed, open, half_open. */
  from: string;
  to: string;
  reason: string;
  /** Which Gantry instance saw it (each instance judges health from its own traffic). */
  instance: string;
}

export interface HistoryQuery {
  model?: string;
  /** Only changes at or after this time (ms). */
  since?: number;
  /** At most this many, newest first (default 100). */
  limit?: number;
}

export interface StatusHistory {
  record(change: StatusChange): Promise<void>;
  /** Newest first. */
  list(query?: HistoryQuery): Promise<StatusChange[]>;
  close(): Promise<void>;
}

export const DEFAULT_LIST_LIMIT = 100;
