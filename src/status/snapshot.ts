import type { Gantry } from '../context.js';
import type { StatusChange } from '../routing/history.js';
import type { Incident } from './incidents.js';
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
  worst,
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
  /**
   * False for a model whose health Gantry does not judge (it serves only predictions): its status is the
   * configured one or an override, and it has no uptime windows (`uptime` is empty) nor automatic incidents.
   */
  monitored: boolean;
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
  /** Operational while the server answers, unless an incident names it; undefined with the console off. */
  console: ComponentView | undefined;
  models: ComponentView[];
  /** Newest first. */
  changes: ChangeView[];
  /** False when the incidents could not be read (the page then shows none). */
  incidentsAvailable: boolean;
  /**
   * Open ones (newest first), then those resolved within RECENT_INCIDENTS_MS (newest first); only the
   * components the page shows are named.
   */
  incidents: Incident[];
  /** The names of the components, for the incidents' text. */
  names: ReadonlyMap<string, string>;
}

export const API_ID = 'api';
export const CONSOLE_ID = 'console';
const FEED_ENTRIES = 50;
/** Resolved incidents stay on the page (and their entries in the feed) this long. */
export const RECENT_INCIDENTS_MS = 7 * 24 * 3_600_000;
const MAX_INCIDENTS = 50;

interface PublicModel {
  id: string;
  name: string;
  status: Status;
  reason: string | null;
  monitored: boolean;
}

/**
 * The models everyone may see (no `accounts` list) with the status /v1/models shows (Catalog.statusOf):
 * an operator's override, else the config's `status`, else the status derived from the deployments' health.
 */
function publicModels(gantry: Gantry): PublicModel[] {
  const out: PublicModel[] = [];
  for (const model of gantry.catalog.all()) {
    const entry = model.entry;
    if (entry.accounts !== undefined) continue;
    const shown = gantry.catalog.statusOf(entry, gantry.routing.statusOf(entry.namespace));
    const status = asStatus(shown.status) ?? 'operational';
    // Only models served by inference have their health judged (and their status recorded).
    const monitored = gantry.routing.of(entry.namespace) !== undefined;
    out.push({
      id: entry.namespace,
      name: entry.name ?? entry.namespace,
      status,
      reason: shown.reason,
      monitored,
    });
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
  let incidentsRead: Incident[] = [];
  let incidentsAvailable = true;
  await Promise.all([
    gantry.routing.history
      .list({ since: start, limit: gantry.config.routing.historyLimit })
      .then((list) => {
        all = list;
      })
      .catch(() => {
        historyAvailable = false;
      }),
    gantry.plane.incidents
      .list({ since: start, limit: 500 })
      .then((list) => {
        incidentsRead = list;
      })
      .catch(() => {
        incidentsAvailable = false;
      }),
  ]);
  const byModel = new Map<string, Array<StatusChange & { from: Status; to: Status }>>();
  for (const m of models) byModel.set(m.id, []);
  for (const c of all) {
    if (c.deployment !== undefined) continue;
    const from = asStatus(c.from);
    const to = asStatus(c.to);
    const list = byModel.get(c.model);
    if (list && from && to) list.push({ ...c, from, to });
  }

  // Two timelines per model: as recorded (the feed's changes), and ending in the status shown now (the
  // bars), which differ only when the history lags behind what is shown.
  const timelines: Timeline[] = [];
  const shownTimelines: Timeline[] = [];
  const views: ComponentView[] = [];
  const changes: ChangeView[] = [];
  for (const m of models) {
    if (!m.monitored) {
      views.push({ ...m, uptime: {} });
      continue;
    }
    const mine = byModel.get(m.id) ?? [];
    const timeline = timelineOf(mine, m.status, start);
    const shown = timelineOf(mine, m.status, start, now);
    timelines.push(timeline);
    shownTimelines.push(shown);
    views.push({ ...m, uptime: windowsOf(shown, now) });
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

  const names = new Map<string, string>([[API_ID, 'API']]);
  const consoleOn = gantry.config.web.console.enabled;
  if (consoleOn) names.set(CONSOLE_ID, 'Console');
  for (const m of models) names.set(m.id, m.name);
  const shown = shownIncidents(incidentsRead, names);
  let consoleView: ComponentView | undefined;
  if (consoleOn) {
    const mine = shown.all.filter((i) => i.components.includes(CONSOLE_ID));
    const open = mine.filter((i) => i.resolvedAt === null);
    const status = open.reduce<Status>((s, i) => worst(s, impactStatus(i)), 'operational');
    consoleView = {
      id: CONSOLE_ID,
      name: 'Console',
      status,
      reason: open[0]?.title ?? null,
      monitored: true,
      uptime: windowsOf(incidentTimeline(mine, start), now),
    };
  }

  return {
    generatedAt: now,
    historyAvailable,
    api: {
      id: API_ID,
      name: 'API',
      status: current,
      reason: apiReasonOf(models.map((m) => m.status)),
      monitored: true,
      uptime: windowsOf(combine(shownTimelines, start), now),
    },
    console: consoleView,
    models: views,
    changes: changes.slice(0, FEED_ENTRIES),
    incidentsAvailable,
    incidents: shown.page.filter((i) => i.resolvedAt === null || now - i.resolvedAt <= RECENT_INCIDENTS_MS),
    names,
  };
}

/**
 * The incidents as the public page may show them: components it does not show (a model made private
 * since) are left out, an incident left with none is not shown. `page`: open first, then resolved, each
 * newest first, at most MAX_INCIDENTS.
 */
function shownIncidents(list: readonly Incident[], names: ReadonlyMap<string, string>) {
  const all: Incident[] = [];
  for (const i of list) {
    const components = i.components.filter((c) => names.has(c));
    if (components.length > 0) all.push({ ...i, components });
  }
  const byOpened = (x: Incident, y: Incident) => y.openedAt - x.openedAt || x.id.localeCompare(y.id);
  const open = all.filter((i) => i.resolvedAt === null).sort(byOpened);
  const resolved = all
    .filter((i) => i.resolvedAt !== null)
    .sort((x, y) => (y.resolvedAt ?? 0) - (x.resolvedAt ?? 0) || byOpened(x, y));
  return { all, page: [...open, ...resolved].slice(0, MAX_INCIDENTS) };
}

/** What an incident's impact means for its component's bars: maintenance counts as degraded. */
function impactStatus(i: Incident): Status {
  return i.impact === 'offline' ? 'offline' : 'degraded';
}

/** A timeline made of incidents: at any moment the worst impact of those open then. */
export function incidentTimeline(list: readonly Incident[], start: number): Timeline {
  const points = new Set<number>([start]);
  for (const i of list) {
    points.add(Math.max(i.openedAt, start));
    if (i.resolvedAt !== null) points.add(Math.max(i.resolvedAt, start));
  }
  const statusAt = (at: number): Status =>
    list.reduce<Status>(
      (s, i) =>
        i.openedAt <= at && (i.resolvedAt === null || i.resolvedAt > at) ? worst(s, impactStatus(i)) : s,
      'operational',
    );
  const initial = statusAt(start);
  const changes: Array<{ at: number; to: Status }> = [];
  let last = initial;
  for (const at of [...points].sort((x, y) => x - y)) {
    if (at <= start) continue;
    const to = statusAt(at);
    if (to !== last) changes.push({ at, to });
    last = to;
  }
  return { initial, start, changes };
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
