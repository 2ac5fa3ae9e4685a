import { describe, expect, it } from 'vitest';
import { Cancellation, LinkedAbort, onAbort } from '../../providers/abort.js';

/** Something that aborts, and what onAbort() listens to on it. */
interface Subject {
  abort(): void;
  source: Parameters<typeof onAbort>[0];
  signal: AbortSignal;
}

const subjects: Array<[string, () => Subject]> = [
  [
    'a Cancellation',
    () => {
      const c = new Cancellation();
      return { abort: () => c.abort(), source: c, signal: c.signal };
    },
  ],
  [
    'a Cancellation’s signal',
    () => {
      const c = new Cancellation();
      return { abort: () => c.abort(), source: c.signal, signal: c.signal };
    },
  ],
  [
    'a plain AbortSignal',
    () => {
      const c = new AbortController();
      return { abort: () => c.abort(), source: c.signal, signal: c.signal };
    },
  ],
];

describe('onAbort', () => {
  for (const [kind, make] of subjects) {
    it(`calls each listener once, after the signal aborted, on ${kind}`, () => {
      const s = make();
      const calls: string[] = [];
      onAbort(s.source, () => calls.push(`a:${s.signal.aborted}`));
      const stop = onAbort(s.source, () => calls.push('removed'));
      onAbort(s.source, () => calls.push('b'));
      stop();
      s.abort();
      s.abort();
      expect(calls).toEqual(['a:true', 'b']);
    });

    it(`keeps the signal a real AbortSignal on ${kind}`, () => {
      const s = make();
      const events: string[] = [];
      s.signal.addEventListener('abort', () => events.push('event'));
      s.abort();
      expect(events).toEqual(['event']);
      expect((s.signal.reason as Error).name).toBe('AbortError');
    });
  }
});

describe('Cancellation', () => {
  it('makes no AbortSignal until asked, and one made after the abort is aborted', () => {
    const c = new Cancellation();
    expect(c.aborted).toBe(false);
    expect(c.reason).toBeUndefined();
    c.abort();
    expect(c.aborted).toBe(true);
    expect(c.signal.aborted).toBe(true);
    expect((c.reason as Error).name).toBe('AbortError');
  });

  it('is followed by LinkedAbort through its signal, until released', () => {
    const parent = new Cancellation();
    const linked = new LinkedAbort(parent.signal);
    parent.abort();
    expect(linked.signal.aborted).toBe(true);

    const other = new Cancellation();
    const released = new LinkedAbort(other.signal, 60_000);
    released.release();
    other.abort();
    expect(released.signal.aborted).toBe(false);
  });
});
