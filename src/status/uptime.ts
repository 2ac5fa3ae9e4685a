/**
 * Uptime from the status history: pure functions over a component's timeline (README, "Status page").
 *
 * A timeline is the status at the window's start and the changes after it, oldest first. Each bucket
 * counts the milliseconds spent in each status; its uptime is the share of that time not `offline`
 * (degraded still answers), and its colour is the worst status held for any time inside it.
 */

export type Status = 'operational' | 'degraded' | 'offline';

export const STATUSES: readonly Status[] = ['operational', 'degraded', 'offline'];

const RANK: Record<Status, number> = { operational: 0, degraded: 1, offline: 2 };

export function asStatus(value: string): Status | undefined {
  return value === 'operational' || value === 'degraded' || value === 'offline' ? value : undefined;
}

export function worst(a: Status, b: Status): Status {
  return RANK[a] >= RANK[b] ? a : b;
}

export interface Timeline {
  /** The status at `start` (before any change in the list). */
  initial: Status;
  start: number;
  /** Oldest first, each at or after `start`. */
  changes: ReadonlyArray<{ at: number; to: Status }>;
}

export interface Bucket {
  start: number;
  end: number;
  /** Worst status held for any time in the bucket. */
  status: Status;
  /** Share of the bucket not offline, 0–100, two decimals. */
  uptime: number;
  ms: Record<Status, number>;
}

export interface WindowSpec {
  key: string;
  buckets: number;
  bucketMs: number;
}

export const HOUR = 3_600_000;
export const DAY = 24 * HOUR;

/** 24 hourly bars, 7 daily and 90 daily, each aligned to UTC hours or days; the last one ends now. */
export const WINDOWS: readonly WindowSpec[] = [
  { key: '24h', buckets: 24, bucketMs: HOUR },
  { key: '7d', buckets: 7, bucketMs: DAY },
  { key: '90d', buckets: 90, bucketMs: DAY },
];

/** The start of the oldest bucket of the window ending at `now`. */
export function windowStart(spec: WindowSpec, now: number): number {
  return Math.floor(now / spec.bucketMs) * spec.bucketMs - (spec.buckets - 1) * spec.bucketMs;
}

/**
 * The timeline of one component over [start, now] from its changes (any order, any age): the status
 * at `start` is the `to` of the last change before it, else the `from` of the first change after it
 * (time before the first record counts as the status it started from), else `current`. It ends in
 * `current`, the status shown now: when the history says otherwise (a change not recorded yet, or lost),
 * a change to `current` at `now` is added, which takes no time (no uptime is made up) but colours the
 * last bar (see buckets).
 */
export function timelineOf(
  changes: ReadonlyArray<{ at: number; from: Status; to: Status }>,
  current: Status,
  start: number,
  now?: number,
): Timeline {
  const sorted = [...changes].filter((c) => now === undefined || c.at <= now).sort((x, y) => x.at - y.at);
  let initial: Status | undefined;
  const after: Array<{ at: number; to: Status }> = [];
  for (const c of sorted) {
    if (c.at < start) initial = c.to;
    else after.push({ at: c.at, to: c.to });
  }
  if (initial === undefined) initial = sorted.find((c) => c.at >= start)?.from ?? current;
  const last = after.at(-1)?.to ?? initial;
  if (now !== undefined && last !== current) after.push({ at: Math.max(now, start), to: current });
  return { initial, start, changes: after };
}

/** The status after every change of the timeline: the one it ends in. */
export function finalStatus(timeline: Timeline): Status {
  return timeline.changes.at(-1)?.to ?? timeline.initial;
}

/**
 * The buckets of one window over the timeline, oldest first; a bucket's time ends at `now` at most. The
 * last bar's colour is also at least the status the timeline ends in (the one shown now), even if it
 * has held no time yet.
 */
export function buckets(timeline: Timeline, spec: WindowSpec, now: number): Bucket[] {
  const out: Bucket[] = [];
  const first = windowStart(spec, now);
  for (let i = 0; i < spec.buckets; i++) {
    const start = first + i * spec.bucketMs;
    out.push(bucketOf(timeline, start, Math.min(start + spec.bucketMs, now)));
  }
  const last = out.at(-1);
  if (last !== undefined) last.status = worst(last.status, finalStatus(timeline));
  return out;
}

function bucketOf(timeline: Timeline, start: number, end: number): Bucket {
  const ms: Record<Status, number> = { operational: 0, degraded: 0, offline: 0 };
  let status = timeline.initial;
  let at = Math.max(timeline.start, start);
  for (const c of timeline.changes) {
    if (c.at <= start) {
      status = c.to;
      continue;
    }
    if (c.at >= end) break;
    ms[status] += c.at - at;
    at = c.at;
    status = c.to;
  }
  if (end > at) ms[status] += end - at;
  return { start, end, status: worstHeld(ms), uptime: uptimeOf(ms), ms };
}

function worstHeld(ms: Record<Status, number>): Status {
  if (ms.offline > 0) return 'offline';
  if (ms.degraded > 0) return 'degraded';
  return 'operational';
}

/** Percentage of the time not offline; 100 for a bucket with no time (cannot happen but stays defined). */
export function uptimeOf(ms: Record<Status, number>): number {
  const total = ms.operational + ms.degraded + ms.offline;
  if (total === 0) return 100;
  return Math.round(((ms.operational + ms.degraded) / total) * 10_000) / 100;
}

/** Sum of the buckets' time, for a window's overall uptime. */
export function total(list: readonly Bucket[]): Record<Status, number> {
  const ms: Record<Status, number> = { operational: 0, degraded: 0, offline: 0 };
  for (const b of list) for (const s of STATUSES) ms[s] += b.ms[s];
  return ms;
}

/**
 * The API's timeline from the models': at any moment `offline` when every model is offline, `degraded`
 * when any is not operational, else `operational`.
 */
export function combine(timelines: readonly Timeline[], start: number): Timeline {
  const state = timelines.map((t) => t.initial);
  const events = timelines
    .flatMap((t, index) => t.changes.map((c) => ({ at: c.at, to: c.to, index })))
    .sort((x, y) => x.at - y.at);
  const initial = apiStatus(state);
  const changes: Array<{ at: number; to: Status }> = [];
  let last = initial;
  for (const e of events) {
    state[e.index] = e.to;
    const now = apiStatus(state);
    if (now !== last) {
      changes.push({ at: e.at, to: now });
      last = now;
    }
  }
  return { initial, start, changes };
}

export function apiStatus(models: readonly Status[]): Status {
  if (models.length > 0 && models.every((s) => s === 'offline')) return 'offline';
  return models.some((s) => s !== 'operational') ? 'degraded' : 'operational';
}
