import { describe, expect, it } from 'vitest';
import {
  Breaker,
  type BreakerChange,
  type BreakerState,
  isTrial,
  NORMAL,
  type Permit,
  REFUSED,
  TRIAL,
} from '../../src/routing/breaker.js';
import { OutcomeWindow } from '../../src/routing/window.js';

const SETTINGS = {
  consecutiveFailures: 3,
  errorRate: 0.5,
  minRequests: 4,
  windowMs: 10_000,
  cooldownMs: 1_000,
  halfOpenRequests: 2,
};

/**
 * One step: a call at time `t` that succeeds (ok) or fails (fail), or only asks for a permit (ask, kept
 * for the next ok or fail); then the expected state.
 */
type Step =
  | { t: number; do: 'ok' | 'fail'; state: BreakerState }
  | { t: number; do: 'ask'; permit: Permit; state: BreakerState };

interface Case {
  name: string;
  steps: Step[];
  /** The transitions seen, in order. */
  changes: string[];
}

const cases: Case[] = [
  {
    name: 'opens after the configured consecutive failures',
    steps: [
      { t: 0, do: 'fail', state: 'closed' },
      { t: 1, do: 'fail', state: 'closed' },
      { t: 2, do: 'fail', state: 'open' },
      { t: 3, do: 'ask', permit: REFUSED, state: 'open' },
    ],
    changes: ['closed>open:3 consecutive failures'],
  },
  {
    name: 'a success resets the run of failures',
    steps: [
      ...Array.from({ length: 6 }, () => ({ t: 0, do: 'ok' as const, state: 'closed' as const })),
      { t: 0, do: 'fail', state: 'closed' },
      { t: 1, do: 'fail', state: 'closed' },
      { t: 2, do: 'ok', state: 'closed' },
      { t: 3, do: 'fail', state: 'closed' },
      { t: 3, do: 'fail', state: 'closed' },
      { t: 4, do: 'ok', state: 'closed' },
    ],
    changes: [],
  },
  {
    name: 'opens on the error rate once the minimum volume is reached',
    steps: [
      { t: 0, do: 'ok', state: 'closed' },
      { t: 1, do: 'fail', state: 'closed' },
      { t: 2, do: 'ok', state: 'closed' },
      // 2 of 4 failed: 50%, at the minimum volume.
      { t: 3, do: 'fail', state: 'open' },
    ],
    changes: ['closed>open:error rate 50% over 4 calls'],
  },
  {
    name: 'half-opens after the cooldown, lets a bounded number of trials through, closes on success',
    steps: [
      { t: 0, do: 'fail', state: 'closed' },
      { t: 0, do: 'fail', state: 'closed' },
      { t: 0, do: 'fail', state: 'open' },
      { t: 999, do: 'ask', permit: REFUSED, state: 'open' },
      { t: 1000, do: 'ask', permit: TRIAL, state: 'half_open' },
      { t: 1001, do: 'ask', permit: TRIAL, state: 'half_open' },
      // Two trials in flight: the third is refused.
      { t: 1002, do: 'ask', permit: REFUSED, state: 'half_open' },
      { t: 1003, do: 'ok', state: 'closed' },
      { t: 1004, do: 'ask', permit: NORMAL, state: 'closed' },
    ],
    changes: [
      'closed>open:3 consecutive failures',
      'open>half_open:cooldown over',
      'half_open>closed:trial call succeeded',
    ],
  },
  {
    name: 'a failed trial opens it again for another cooldown',
    steps: [
      { t: 0, do: 'fail', state: 'closed' },
      { t: 0, do: 'fail', state: 'closed' },
      { t: 0, do: 'fail', state: 'open' },
      { t: 1500, do: 'fail', state: 'open' },
      { t: 2499, do: 'ask', permit: REFUSED, state: 'open' },
      { t: 2500, do: 'ask', permit: TRIAL, state: 'half_open' },
    ],
    changes: [
      'closed>open:3 consecutive failures',
      'open>half_open:cooldown over',
      'half_open>open:trial call failed',
      'open>half_open:cooldown over',
    ],
  },
];

describe('Breaker', () => {
  it.each(cases)('$name', ({ steps, changes }) => {
    const seen: string[] = [];
    const breaker = new Breaker(SETTINGS, (c: BreakerChange) => seen.push(`${c.from}>${c.to}:${c.reason}`));
    const window = new OutcomeWindow(SETTINGS.windowMs);
    const held: Permit[] = [];
    for (const [i, step] of steps.entries()) {
      const where = `step ${i}`;
      if (step.do === 'ask') {
        const permit = breaker.acquire(step.t);
        // A trial permit also names its half-open period: any trial matches TRIAL here.
        if (step.permit === TRIAL) expect(isTrial(permit), where).toBe(true);
        else expect(permit, where).toBe(step.permit);
        if (permit !== REFUSED) held.push(permit);
      } else {
        const permit = held.shift() ?? breaker.acquire(step.t);
        if (step.do === 'ok') {
          window.add(step.t, false, 10);
          breaker.success(permit, step.t);
        } else {
          window.add(step.t, true, undefined);
          const { calls, failures } = window.counts(step.t);
          breaker.failure(permit, step.t, calls, failures);
        }
      }
      expect(breaker.state, where).toBe(step.state);
    }
    expect(seen).toEqual(changes);
  });

  it('gives a trial back when its call ends without a verdict, and says how long until the next trial', () => {
    const breaker = new Breaker({ ...SETTINGS, halfOpenRequests: 1 });
    for (let i = 0; i < 3; i++) breaker.failure(NORMAL, 0, i + 1, i + 1);
    expect(breaker.waitMs(250)).toBe(750);
    const trial = breaker.acquire(1000);
    expect(trial).toBe(TRIAL);
    expect(breaker.acquire(1000)).toBe(REFUSED);
    breaker.release(trial);
    expect(breaker.acquire(1000)).toBe(TRIAL);
    expect(breaker.waitMs(1000)).toBe(0);
  });
});

describe('Breaker trials of an earlier half-open period', () => {
  const TWO = { ...SETTINGS, consecutiveFailures: 1, halfOpenRequests: 2 };

  it('a stale trial that ends without a verdict does not give a slot of the new period back', () => {
    const breaker = new Breaker(TWO);
    breaker.failure(NORMAL, 0, 1, 1);
    const t1 = breaker.acquire(1000);
    const t2 = breaker.acquire(1000);
    breaker.failure(t1, 1100, 1, 1);
    expect(breaker.state).toBe('open');
    expect(isTrial(breaker.acquire(2100))).toBe(true);
    expect(isTrial(breaker.acquire(2100))).toBe(true);
    breaker.release(t2);
    // Still two trials of the new period in flight: a third is refused.
    expect(breaker.acquire(2101)).toBe(REFUSED);
  });

  it('a stale trial that fails once the circuit closed counts as a normal failure', () => {
    const breaker = new Breaker(TWO);
    breaker.failure(NORMAL, 0, 1, 1);
    const t1 = breaker.acquire(1000);
    const t2 = breaker.acquire(1000);
    breaker.success(t1, 1001);
    expect(breaker.state).toBe('closed');
    breaker.failure(t2, 1002, 1, 1);
    expect(breaker.state).toBe('open');
  });

  it('a stale trial that succeeds does not close a circuit that opened again', () => {
    const breaker = new Breaker(TWO);
    breaker.failure(NORMAL, 0, 1, 1);
    const t1 = breaker.acquire(1000);
    const t2 = breaker.acquire(1000);
    breaker.failure(t1, 1100, 1, 1);
    const t3 = breaker.acquire(2100);
    expect(breaker.state).toBe('half_open');
    breaker.success(t2, 2101);
    expect(breaker.state).toBe('half_open');
    breaker.success(t3, 2102);
    expect(breaker.state).toBe('closed');
  });
});

describe('OutcomeWindow', () => {
  it.each([
    { name: 'counts within the window', adds: [0, 100, 9_000], at: 9_500, calls: 3 },
    { name: 'forgets what slid out', adds: [0, 100, 9_000], at: 10_500, calls: 1 },
    { name: 'forgets everything after a long silence', adds: [0, 5_000], at: 40_000, calls: 0 },
  ])('$name', ({ adds, at, calls }) => {
    const window = new OutcomeWindow(10_000);
    for (const t of adds) window.add(t, t === 0, 20);
    expect(window.counts(at).calls).toBe(calls);
  });

  it('averages the times to first byte of the calls that reported one', () => {
    const window = new OutcomeWindow(10_000);
    window.add(0, false, 10);
    window.add(1, false, 30);
    window.add(2, true, undefined);
    expect(window.counts(3)).toEqual({ calls: 3, failures: 1, meanTtfbMs: 20 });
  });
});
