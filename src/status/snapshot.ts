import type { Gantry } from '../context.js';
import type { StatusChange } from '../routing/history.js';
import {
  apiStatus,
  asStatus,
  buckets,
  combine,
  type Status,
  type Timeline,
  timelineOf,
  total,
  uptimeOf,
  WINDOWS,
  windowStart,
} from './uptime.js';

/** One bar of an uptime window, as /status.json shows it (README, "Status page"). */
export interface BucketView {
  start: string;
  end: string;
  status: Status;
  uptime_percent: number;
  seconds: Record<Status, number>;
}

export interface WindowView {
  bucket_seconds: number;
  uptime_percent: number;
  buckets: BucketView[];
}

export interface ComponentView {
  id: string;
  name: string;
  status: Status;
  reason: string | null;
  uptime: Record<string, WindowView>;
}

/** One status change of the API or a public model: an entry of the Atom feed. */
export interface ChangeView {
  component: string;
  name: string;
  at: number;
  from: Status;
  to: Status;
  reason: string;
  /** Tells apart changes at the same millisecond (several instances share a Redis history). */
  instance: string;
}

export interface Snapshot {
  generatedAt: number;
  /** False when the status history could not be read: the uptime then assumes the current status. */
  historyAvailable: boolean;
  api: ComponentView;
  models: ComponentView[];
  /** Newest first. */
  changes: ChangeView[];
}

export const API_ID = 'api';
const FEED_ENTRIES = 50;

interface PublicModel {
  id: string;
  name: string;
  status: Status;
  reason: string | null;
}

/**
 * The models everyone may see (no `accounts` list) with the status /v1/models shows: the config's
 * `status` is an operator's override and wins, else the status derived from the deployments' health.
 */
function publicModels(gantry: Gantry): PublicModel[] {
  const out: PublicModel[] = [];
  for (const model of gantry.catalog.all()) {
    const entry = model.entry;
    if (entry.accounts !== undefined) continue;
    const base = { id: entry.namespace, name: entry.name ?? entry.namespace };
    const override = entry.status === undefined ? undefined : asStatus(entry.status);
    if (override !== undefined) {
      out.push({ ...base, status: override, reason: entry.status_reason ?? null });
      continue;
    }
    const derived = gantry.routing.statusOf(entry.namespace);
    out.push({ ...base, status: derived?.status ?? 'operational', reason: derived?.reason ?? null });
  }
  return out;
}

/** Everything the three views show, read from the catalogue and one query of the status history. */
export async function takeSnapshot(gantry: Gantry, now = Date.now()): Promise<Snapshot> {
  const models = publicModels(gantry);
  const start = Math.min(...WINDOWS.map((w) => windowStart(w, now)));
  // One query for every model (the history holds at most `historyLimit` entries): the models' own
  // changes, not their deployments'.
  // A status page must answer when the history's store does not (Redis down): then the current
  // statuses are shown, and the windows say the history is missing instead of inventing uptime.
  let all: StatusChange[] = [];
  let historyAvailable = true;
  try {
    all = await gantry.routing.history.list({ since: start, limit: gantry.config.routing.historyLimit });
  } catch {
    historyAvailable = false;
  }
  const byModel = new Map<string, Array<StatusChange & { from: Status; to: Status }>>();
  for (const m of models) byModel.set(m.id, []);
  for (const c of all) {
    if (c.deployment !== undefined) continue;
    const from = asStatus(c.from);
    const to = asStatus(c.to);
    const list = byModel.get(c.model);
    if (list && from && to) list.push({ ...c, from, to });
  }

  const timelines: Timeline[] = [];
  const views: ComponentView[] = [];
  const changes: ChangeView[] = [];
  for (const m of models) {
    const mine = byModel.get(m.id) ?? [];
    const timeline = timelineOf(mine, m.status, start);
    timelines.push(timeline);
    views.push({ ...m, uptime: windowsOf(timeline, now) });
    // Oldest first, skipping a change to the status already held: in Redis mode several instances
    // record the same change, and the feed shows it once (the first instance that saw it).
    let held = timeline.initial;
    for (const c of [...mine].sort((x, y) => x.at - y.at)) {
      if (c.to === held) continue;
      held = c.to;
      changes.push({
        component: m.id,
        name: m.name,
        at: c.at,
        from: c.from,
        to: c.to,
        reason: c.reason,
        instance: c.instance,
      });
    }
  }

  const apiTimeline = combine(timelines, start);
  const current = apiStatus(models.map((m) => m.status));
  let previous = apiTimeline.initial;
  for (const c of apiTimeline.changes) {
    changes.push({
      component: API_ID,
      name: 'API',
      at: c.at,
      from: previous,
      to: c.to,
      reason: apiReason(c.to, timelines, c.at),
      instance: '',
    });
    previous = c.to;
  }
  changes.sort((x, y) => y.at - x.at || x.component.localeCompare(y.component));

  return {
    generatedAt: now,
    historyAvailable,
    api: {
      id: API_ID,
      name: 'API',
      status: current,
      reason: apiReasonOf(models.map((m) => m.status)),
      uptime: windowsOf(apiTimeline, now),
    },
    models: views,
    changes: changes.slice(0, FEED_ENTRIES),
  };
}

function windowsOf(timeline: Timeline, now: number): Record<string, WindowView> {
  const out: Record<string, WindowView> = {};
  for (const spec of WINDOWS) {
    const list = buckets(timeline, spec, now);
    out[spec.key] = {
      bucket_seconds: spec.bucketMs / 1000,
      uptime_percent: uptimeOf(total(list)),
      buckets: list.map((b) => ({
        start: new Date(b.start).toISOString(),
        end: new Date(b.end).toISOString(),
        status: b.status,
        uptime_percent: b.uptime,
        seconds: {
          operational: Math.round(b.ms.operational / 1000),
          degraded: Math.round(b.ms.degraded / 1000),
          offline: Math.round(b.ms.offline / 1000),
        },
      })),
    };
  }
  return out;
}

/** The status of each model at `at` (after the changes at that instant). */
function statusesAt(timelines: readonly Timeline[], at: number): Status[] {
  return timelines.map((t) => {
    let s = t.initial;
    for (const c of t.changes) {
      if (c.at > at) break;
      s = c.to;
    }
    return s;
  });
}

function apiReason(to: Status, timelines: readonly Timeline[], at: number): string {
  return apiReasonOf(statusesAt(timelines, at)) ?? `all models ${to}`;
}

function apiReasonOf(statuses: readonly Status[]): string | null {
  const unwell = statuses.filter((s) => s !== 'operational').length;
  if (unwell === 0) return null;
  if (statuses.every((s) => s === 'offline')) return `all ${statuses.length} models are offline`;
  return `${unwell} of ${statuses.length} models not operational`;
}
