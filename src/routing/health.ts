import type { ModelRoute, RoutingSettings } from '../config/types.js';
import type { ObserveChild } from '../metric-children.js';
import { Breaker, type BreakerChange, type Permit } from './breaker.js';
import { OutcomeWindow, type WindowCounts } from './window.js';

/** Weight of the newest sample in the time-to-first-byte average the `latency` strategy compares. */
const EWMA_ALPHA = 0.3;

export interface DeploymentHooks {
  /** The circuit changed state. */
  onChange(deployment: Deployment, change: BreakerChange, now: number): void;
  /** Observes a time to first byte (seconds) in the deployment's histogram. */
  ttfb: ObserveChild;
}

/**
 * One deployment of a model (a provider and the upstream model it serves), with the passive health
 * learned from real traffic: its circuit breaker, a sliding window of outcomes, the moving average of its
 * time to first byte, and the calls in flight.
 */
export class Deployment {
  readonly provider: string;
  readonly upstreamModel: string;
  readonly weight: number;
  /** `provider/upstream-model`, for logs, the status history and the API. */
  readonly id: string;
  readonly breaker: Breaker;
  readonly window: OutcomeWindow;
  inflight = 0;
  /** Moving average of the time to first byte (ms); undefined until one call reported it. */
  ewmaTtfbMs: number | undefined;
  /** When ewmaTtfbMs was last updated (ms since the epoch). */
  ttfbAt = 0;
  /** When a call or probe last started (ms since the epoch). */
  lastUsedAt = 0;
  /**
   * The circuit was last opened by probes alone: a probe's success may close it. One opened by real
   * calls is closed only by a real call (a model list that answers says little of inference).
   */
  openedByProbe = false;

  constructor(
    route: ModelRoute,
    readonly index: number,
    settings: RoutingSettings,
    private readonly hooks: DeploymentHooks,
  ) {
    this.provider = route.provider;
    this.upstreamModel = route.model;
    this.weight = route.weight ?? 1;
    this.id = `${route.provider}/${route.model}`;
    this.window = new OutcomeWindow(settings.breaker.windowMs);
    this.breaker = new Breaker(settings.breaker, (change, now) => {
      // A circuit that closes again starts over: the failures that opened it are history.
      if (change.to === 'closed') this.window.clear();
      hooks.onChange(this, change, now);
    });
  }

  /** Starts a call: a permit, REFUSED (0) when the circuit is open or its trials are taken. */
  begin(now: number): Permit {
    const permit = this.breaker.acquire(now);
    if (permit !== 0) {
      this.inflight++;
      this.lastUsedAt = now;
    }
    return permit;
  }

  /** The call was answered (a verdict: once per call, a trial's included); `ttfbMs` when it reported a first byte or token. */
  succeeded(permit: Permit, now: number, ttfbMs: number | undefined): void {
    this.window.add(now, false, ttfbMs);
    if (ttfbMs !== undefined) {
      this.ewmaTtfbMs =
        this.ewmaTtfbMs === undefined ? ttfbMs : this.ewmaTtfbMs + EWMA_ALPHA * (ttfbMs - this.ewmaTtfbMs);
      this.ttfbAt = now;
      this.hooks.ttfb.observe(ttfbMs / 1000);
    }
    this.breaker.success(permit, now);
  }

  /**
   * The call failed in a way that says the deployment is unwell (connect, timeout, 5xx, 429, 529).
   * `probe`: the failure was an active probe's (src/routing/probes.ts).
   */
  failed(permit: Permit, now: number, probe = false): void {
    this.window.add(now, true, undefined);
    const { calls, failures } = this.window.counts(now);
    const wasOpen = this.breaker.state === 'open';
    this.breaker.failure(permit, now, calls, failures);
    if (!wasOpen && this.breaker.state === 'open') this.openedByProbe = probe;
  }

  /** The call ended without a verdict (the client left): a trial it held goes back. */
  abandoned(permit: Permit): void {
    this.breaker.release(permit);
  }

  /** The call is over (once per `begin` that was not refused, after its verdict). */
  end(): void {
    this.inflight--;
  }

  counts(now: number): WindowCounts {
    return this.window.counts(now);
  }
}
