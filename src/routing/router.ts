import { hostname } from 'node:os';
import type { ModelEntry, ProbeSettings, RoutingSettings } from '../config/types.js';
import { gaugeChild, histogramChild } from '../metric-children.js';
import type { Metrics } from '../metrics.js';
import type { BreakerChange, BreakerState } from './breaker.js';
import { Deployment } from './health.js';
import type { StatusHistory } from './history.js';
import { Probes, type ProbeTarget } from './probes.js';
import { buildRouting } from './settings.js';
import { type DerivedStatus, deriveStatus, type ModelStatus, retryAfterSeconds } from './status.js';
import { orderDeployments, type Random } from './strategies.js';

/** How often every model's status is judged again (error rate and latency move with traffic). */
const STATUS_EVERY_MS = 1_000;
/** How long close() waits for history writes still under way. */
const CLOSE_GRACE_MS = 1_000;
const STATE_VALUE: Record<BreakerState, number> = { closed: 0, half_open: 1, open: 2 };
const STATUS_VALUE: Record<ModelStatus, number> = { operational: 0, degraded: 1, offline: 2 };

export interface RoutingLog {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

/** An operator's status override (src/status/overrides.ts), as the routing reads it. */
export interface ShownOverrides {
  get(namespace: string): { status: ModelStatus; reason: string } | undefined;
}

export interface RoutingDeps {
  metrics: Metrics;
  history: StatusHistory;
  log: RoutingLog;
  probes?: ProbeSettings;
  /** Where each provider is, for probes (only openai and anthropic kinds are probed). */
  probeTargets?: ReadonlyMap<string, ProbeTarget>;
  /** Names this instance in the history (defaults to host:pid). */
  instance?: string;
  random?: Random;
}

/** One model's deployments, their order for a call, and the status derived from their health. */
export class ModelRouting {
  readonly deployments: Deployment[] = [];
  status: DerivedStatus = { status: 'operational', reason: undefined };
  /** The status last written to the history (it may lag `status`, see Routing.judge). */
  recorded: ModelStatus = 'operational';
  /** `status` last changed only because a cooldown ended (a circuit went half-open by the clock). */
  changedByCooldown = false;

  constructor(
    readonly namespace: string,
    readonly settings: RoutingSettings,
    private readonly random: Random,
    /**
     * The catalogue's entry, read live: its `status` (from the config, or set by Gantry when it cannot
     * serve the model) is shown, and recorded, in place of the derived one.
     */
    readonly configured: Pick<ModelEntry, 'status' | 'status_reason'> = {},
  ) {}

  /** The deployments in the order this call tries them (open ones are still listed; dispatch skips them). */
  order(now: number): readonly Deployment[] {
    return orderDeployments(this.settings.strategy, this.deployments, now, this.random);
  }

  /** Whole seconds until an open deployment takes a trial call (for Retry-After). */
  retryAfterSeconds(now: number): number {
    return retryAfterSeconds(this.deployments, now);
  }
}

/**
 * Health-aware routing for every model served by inference (README, "Routing and health"). Each
 * instance judges health from its own traffic: the request path reads and writes only this process's
 * memory. State changes go to the metrics, the log and the status history, off the request path.
 */
export class Routing {
  private readonly models = new Map<string, ModelRouting>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly statusTimer: NodeJS.Timeout;
  private readonly probes: Probes | undefined;
  private readonly instance: string;
  private writes: Promise<void> = Promise.resolve();
  private overrides: ShownOverrides | undefined;

  constructor(
    entries: readonly ModelEntry[],
    private readonly deps: RoutingDeps,
  ) {
    this.instance = deps.instance ?? `${hostname()}:${process.pid}`;
    const random = deps.random ?? Math.random;
    const { metrics } = deps;
    for (const entry of entries) {
      if (!entry.serves.includes('inference')) continue;
      const settings = entry.routing ?? buildRouting({}, undefined);
      const model = new ModelRouting(entry.namespace, settings, random, entry);
      entry.routes.forEach((route, index) => {
        const labels = { model: entry.namespace, provider: route.provider, upstream_model: route.model };
        const state = gaugeChild(metrics.deploymentState, labels);
        state.add(0);
        const deployment = new Deployment(route, index, settings, {
          ttfb: histogramChild(metrics.deploymentTtfb, labels),
          onChange: (d, change, now) => {
            state.add(STATE_VALUE[change.to] - STATE_VALUE[change.from]);
            metrics.breakerTransitions.labels({ ...labels, to: change.to }).inc();
            this.changed(model, d, change, now);
          },
        });
        model.deployments.push(deployment);
      });
      metrics.modelStatus.labels({ model: entry.namespace }).set(0);
      this.models.set(entry.namespace, model);
    }
    this.statusTimer = setInterval(() => this.judgeAll(), STATUS_EVERY_MS);
    this.statusTimer.unref();
    if (deps.probes?.enabled && deps.probeTargets) {
      this.probes = new Probes(deps.probes, deps.probeTargets, [...this.models.values()]);
    }
  }

  /** Every status change recorded (a status page reads it). */
  get history(): StatusHistory {
    return this.deps.history;
  }

  /** The model's routing, or undefined for a model not served by inference. */
  of(namespace: string): ModelRouting | undefined {
    return this.models.get(namespace);
  }

  /** The status derived from health (the config's `status`, an operator's override, is applied by the caller). */
  statusOf(namespace: string): DerivedStatus | undefined {
    return this.models.get(namespace)?.status;
  }

  /**
   * The operators' overrides (set once the control plane is built): the history records the status the
   * page shows, so an override's start and end are changes of their own, and the model's health under an
   * override is not recorded as if it were shown.
   */
  useOverrides(overrides: ShownOverrides): void {
    this.overrides = overrides;
    this.judgeAll();
  }

  /** Judges every model's status again now (also done every second and on every breaker change). */
  judgeAll(now = Date.now()): void {
    for (const model of this.models.values()) this.judge(model, now);
  }

  /** Resolves once the history writes made so far are done (tests, shutdown). */
  flushed(): Promise<void> {
    return this.writes;
  }

  async close(): Promise<void> {
    clearInterval(this.statusTimer);
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.probes?.stop();
    // The last changes get a moment to reach the store; a store that is down does not hold the shutdown.
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, CLOSE_GRACE_MS);
    });
    await Promise.race([this.writes, grace]);
    clearTimeout(timer);
    await this.deps.history.close();
  }

  private changed(model: ModelRouting, d: Deployment, change: BreakerChange, now: number): void {
    const log = change.to === 'open' ? this.deps.log.warn : this.deps.log.info;
    log.call(
      this.deps.log,
      { model: model.namespace, deployment: d.id, from: change.from, to: change.to, reason: change.reason },
      'deployment circuit changed',
    );
    this.record({ at: Date.now(), model: model.namespace, deployment: d.id, ...change });
    const cooldown = change.from === 'open' && change.to === 'half_open';
    if (change.to === 'open') {
      // The trials start on time even when no call comes to ask: status and history stay true.
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        d.breaker.poll(Date.now());
      }, d.breaker.waitMs(now) + 1);
      timer.unref();
      this.timers.add(timer);
    }
    this.judge(model, now, cooldown ? 'cooldown' : 'breaker');
  }

  /**
   * The model's status now. The metric and `status` follow at once; the history records a change only
   * when it differs from the status last recorded and was not caused by a cooldown ending alone (a
   * deployment whose cooldown ends and whose trial fails again would otherwise add two entries per
   * cooldown). Window-based `degraded` has hysteresis (deriveStatus), so it does not flap either.
   */
  private judge(model: ModelRouting, now: number, cause: 'cooldown' | 'breaker' | 'tick' = 'tick'): void {
    const previous = model.status;
    const next = deriveStatus(model.deployments, model.settings, now, previous.status);
    model.status = next;
    // A circuit that closed or opened is news of its own: what the status is now is worth recording.
    if (cause === 'breaker') model.changedByCooldown = false;
    if (next.status !== previous.status) {
      model.changedByCooldown = cause === 'cooldown';
      this.deps.metrics.modelStatus.labels({ model: model.namespace }).set(STATUS_VALUE[next.status]);
      this.deps.log.info(
        { model: model.namespace, from: previous.status, to: next.status, reason: next.reason },
        'model status changed',
      );
    }
    const shown = this.shownOf(model, next);
    if (shown.status === model.recorded) return;
    // A cooldown ending is not news, unless what is shown changed for another reason (an override).
    if (shown.source === 'health' && model.changedByCooldown) return;
    const from = model.recorded;
    model.recorded = shown.status;
    this.record({
      at: Date.now(),
      model: model.namespace,
      deployment: undefined,
      from,
      to: shown.status,
      reason: shown.reason,
    });
  }

  /**
   * What the status page shows (as Catalog.statusOf): an override, else the config's status, else the
   * derived one; the history records this. The config's status is thus recorded once at start.
   */
  private shownOf(
    model: ModelRouting,
    derived: DerivedStatus,
  ): { status: ModelStatus; reason: string; source: 'override' | 'config' | 'health' } {
    const override = this.overrides?.get(model.namespace);
    if (override !== undefined) {
      return { status: override.status, reason: `set by operator: ${override.reason}`, source: 'override' };
    }
    const { status, status_reason: why } = model.configured;
    if (status !== undefined) {
      return { status, reason: why ?? 'set in the configuration', source: 'config' };
    }
    return { status: derived.status, reason: derived.reason ?? 'deployments healthy', source: 'health' };
  }

  /** Written in order, one after the other; a failed write is logged, never thrown at a caller. */
  private record(change: {
    at: number;
    model: string;
    deployment: string | undefined;
    from: string;
    to: string;
    reason: string;
  }): void {
    const full = { ...change, instance: this.instance };
    this.writes = this.writes
      .then(() => this.deps.history.record(full))
      .catch((err: unknown) =>
        this.deps.log.warn({ err: (err as Error).message }, 'could not record a status change'),
      );
  }
}
