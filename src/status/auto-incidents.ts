import type { PlaneDeps } from '../admin/plane.js';
import type { ModelStatus } from '../routing/status.js';
import type { IncidentImpact, IncidentService } from './incidents.js';

/** How often the models' statuses are looked at (the routing judges them every second too). */
const WATCH_EVERY_MS = 1_000;

interface Watched {
  /** When this instance first saw the model non-operational in the current stretch. */
  unwellSince: number | undefined;
  /** When this instance first saw it operational again (undefined while unwell). */
  wellSince: number | undefined;
  /** The open automatic incident this instance follows, and the impact it last gave it. */
  incidentId: string | undefined;
  impact: IncidentImpact | undefined;
  /** This instance saw the model unwell while the incident was open (so its recovery is news). */
  sawUnwell: boolean;
  busy: boolean;
}

/**
 * Automatic incidents (README, "Status page"): a public model this instance sees non-operational for
 * `incident_after_seconds` opens one incident for it (one for all instances: the store refuses a second
 * open automatic incident of a component); a change between degraded and offline is an update; back to
 * operational resolves it. An instance follows an open one it finds at start or on opening (another
 * instance or its previous run opened it) instead of opening another.
 */
export class AutoIncidents {
  private readonly watched = new Map<string, Watched>();
  private readonly timer: NodeJS.Timeout;
  private readonly ready: Promise<void>;
  private stopped = false;

  constructor(
    private readonly incidents: IncidentService,
    private readonly deps: PlaneDeps,
    /** Other instances share the store: only a recovery this instance saw may resolve an incident. */
    private readonly shared: boolean,
    everyMs = WATCH_EVERY_MS,
  ) {
    for (const model of deps.catalog.all()) {
      const entry = model.entry;
      if (entry.accounts !== undefined || deps.routing.of(entry.namespace) === undefined) continue;
      this.watched.set(entry.namespace, {
        unwellSince: undefined,
        wellSince: undefined,
        incidentId: undefined,
        impact: undefined,
        sawUnwell: false,
        busy: false,
      });
    }
    this.ready = this.adopt();
    this.timer = setInterval(() => void this.tick(), everyMs);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }

  /** The open automatic incidents of a previous run: followed, not opened again. */
  private async adopt(): Promise<void> {
    try {
      for (const [component, w] of this.watched) {
        const open = await this.incidents.openAutoOf(component);
        if (open !== undefined) {
          w.incidentId = open.id;
          w.impact = open.impact;
          this.deps.log.info({ model: component, incident: open.id }, 'incident already open, followed');
        }
      }
    } catch (err) {
      this.deps.log.warn({ err: (err as Error).message }, 'could not read the open incidents');
    }
  }

  /** One look at every watched model (also called by tests). */
  async tick(now = Date.now()): Promise<void> {
    await this.ready;
    const work: Promise<void>[] = [];
    for (const [component, w] of this.watched) {
      if (w.busy || this.stopped) continue;
      const derived = this.deps.routing.statusOf(component);
      if (derived === undefined) continue;
      const step = this.step(component, w, derived.status, derived.reason, now);
      if (step === undefined) continue;
      w.busy = true;
      work.push(
        step
          .catch((err: unknown) =>
            this.deps.log.warn(
              { err: (err as Error).message, model: component },
              'automatic incident failed',
            ),
          )
          .finally(() => {
            w.busy = false;
          }),
      );
    }
    await Promise.all(work);
  }

  private step(
    component: string,
    w: Watched,
    status: ModelStatus,
    reason: string | undefined,
    now: number,
  ): Promise<void> | undefined {
    const after = this.deps.config.web.statusPage.incidentAfterMs;
    if (status !== 'operational') {
      w.wellSince = undefined;
      w.unwellSince ??= now;
      if (w.incidentId !== undefined) {
        w.sawUnwell = true;
        if (w.impact === status) return undefined;
        return this.changeImpact(component, w, status, reason, now);
      }
      if (now - w.unwellSince < after) return undefined;
      return this.open(component, w, status, reason);
    }
    w.unwellSince = undefined;
    w.wellSince ??= now;
    if (w.incidentId === undefined) return undefined;
    // Sharing the store, this instance's quiet is not everyone's recovery: only a recovery it saw counts.
    // Alone, an incident left open by a previous run ends once the model held up for the same delay.
    if (!w.sawUnwell && (this.shared || now - w.wellSince < after)) return undefined;
    return this.resolve(component, w);
  }

  private async open(component: string, w: Watched, status: ModelStatus, reason: string | undefined) {
    const { incident, opened } = await this.incidents.openAuto(component, {
      title: `${component} is ${status}`,
      components: [component],
      impact: status as IncidentImpact,
      message: `${component} is ${status}: ${reason ?? 'its deployments are unavailable'}.`,
    });
    w.incidentId = incident.id;
    w.impact = incident.impact;
    w.sawUnwell = true;
    if (opened) this.deps.log.warn({ model: component, incident: incident.id }, 'incident opened');
    else this.deps.log.info({ model: component, incident: incident.id }, 'incident already open, followed');
  }

  private async changeImpact(
    component: string,
    w: Watched,
    status: ModelStatus,
    reason: string | undefined,
    now: number,
  ): Promise<void> {
    const id = w.incidentId as string;
    try {
      await this.incidents.update(id, {
        impact: status as IncidentImpact,
        impactChangeOnly: true,
        message: `${component} is now ${status}: ${reason ?? 'its deployments are unavailable'}.`,
      });
      w.impact = status as IncidentImpact;
    } catch (err) {
      // Resolved meanwhile (by an operator or another instance): a new stretch starts now.
      if (!isGone(err)) throw err;
      this.forget(w);
      w.unwellSince = now;
    }
  }

  private async resolve(component: string, w: Watched): Promise<void> {
    const id = w.incidentId as string;
    try {
      await this.incidents.resolve(id, `${component} is operational again.`);
      this.deps.log.info({ model: component, incident: id }, 'incident resolved');
    } catch (err) {
      if (!isGone(err)) throw err;
    }
    this.forget(w);
  }

  private forget(w: Watched): void {
    w.incidentId = undefined;
    w.impact = undefined;
    w.sawUnwell = false;
  }
}

function isGone(err: unknown): boolean {
  const id = (err as { errorId?: string }).errorId;
  return id === 'CONFLICT' || id === 'NOT_FOUND';
}
