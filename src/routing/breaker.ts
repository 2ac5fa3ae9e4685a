import type { BreakerSettings } from '../config/types.js';

export type BreakerState = 'closed' | 'open' | 'half_open';

export interface BreakerChange {
  from: BreakerState;
  to: BreakerState;
  reason: string;
}

/**
 * What `acquire()` gave: refused, a normal call, or one of the half-open trials. A trial's permit is
 * TRIAL plus the generation of the half-open period that gave it, so a trial still running when its
 * period ended (the circuit closed or opened again meanwhile) is told apart from the trials of a later
 * period: it is then a normal call, and neither takes a trial slot back nor moves the circuit.
 */
export const REFUSED = 0;
export const NORMAL = 1;
export const TRIAL = 2;
export type Permit = number;

/** Is this permit a trial (of any half-open period)? */
export function isTrial(permit: Permit): boolean {
  return permit >= TRIAL;
}

/**
 * One deployment's circuit breaker. Closed: every call goes; it opens after `consecutiveFailures`
 * failures in a row, or when the window's error rate reaches `errorRate` over at least `minRequests`
 * calls. Open: calls are refused (no connection attempt) until `cooldownMs` have passed. Half-open: at
 * most `halfOpenRequests` trial calls at once; a successful trial closes it, a failed one opens it again.
 * Time comes in as an argument, so the transitions are plain functions of the calls (breaker tests).
 */
export class Breaker {
  state: BreakerState = 'closed';
  /** When an open circuit lets its first trial through (ms, the caller's clock). */
  reopensAt = 0;
  private consecutive = 0;
  private trials = 0;
  /** The half-open period now, or next; moves on each time one ends. */
  private generation = 0;

  constructor(
    private readonly settings: BreakerSettings,
    private readonly onChange: (change: BreakerChange, now: number) => void = () => {},
  ) {}

  /** Would a call be let through now (without taking a trial)? */
  selectable(now: number): boolean {
    if (this.state === 'closed') return true;
    if (this.state === 'open') return now >= this.reopensAt;
    return this.trials < this.settings.halfOpenRequests;
  }

  /** Moves an open circuit whose cooldown is over to half-open. */
  poll(now: number): void {
    if (this.state === 'open' && now >= this.reopensAt) this.move('half_open', 'cooldown over', now);
  }

  /** Asks to make a call now; a TRIAL must be answered with success, failure or release. */
  acquire(now: number): Permit {
    if (this.state === 'closed') return NORMAL;
    this.poll(now);
    if (this.state === 'open' || this.trials >= this.settings.halfOpenRequests) return REFUSED;
    this.trials++;
    return TRIAL + this.generation;
  }

  /** A trial ended without a verdict (the client left). */
  release(permit: Permit): void {
    if (this.isCurrentTrial(permit) && this.trials > 0) this.trials--;
  }

  success(permit: Permit, now: number): void {
    this.consecutive = 0;
    if (this.isCurrentTrial(permit)) {
      this.release(permit);
      this.move('closed', 'trial call succeeded', now);
    }
  }

  /** A failed call; `calls` and `failures` are the window's, this failure included. */
  failure(permit: Permit, now: number, calls: number, failures: number): void {
    this.consecutive++;
    if (this.isCurrentTrial(permit)) {
      this.release(permit);
      this.open(now, 'trial call failed');
      return;
    }
    if (this.state !== 'closed') return;
    const s = this.settings;
    if (this.consecutive >= s.consecutiveFailures) {
      this.open(now, `${this.consecutive} consecutive failures`);
    } else if (calls >= s.minRequests && failures / calls >= s.errorRate) {
      this.open(now, `error rate ${Math.round((failures / calls) * 100)}% over ${calls} calls`);
    }
  }

  /** Milliseconds until the next trial may go (0 when one may go now). */
  waitMs(now: number): number {
    return this.state === 'open' ? Math.max(0, this.reopensAt - now) : 0;
  }

  /** A trial of the half-open period under way (a stale one counts as a normal call). */
  private isCurrentTrial(permit: Permit): boolean {
    return this.state === 'half_open' && permit === TRIAL + this.generation;
  }

  private open(now: number, reason: string): void {
    this.reopensAt = now + this.settings.cooldownMs;
    this.move('open', reason, now);
  }

  private move(to: BreakerState, reason: string, now: number): void {
    const from = this.state;
    this.state = to;
    if (to !== 'half_open') this.trials = 0;
    if (from === 'half_open') this.generation++;
    if (to === 'closed') this.consecutive = 0;
    this.onChange({ from, to, reason }, now);
  }
}
