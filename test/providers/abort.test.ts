import { describe, expect, it } from 'vitest';
import { LinkedAbort, listenableAbortController, onAbort } from '../../providers/abort.js';

describe('onAbort', () => {
  for (const [kind, make] of [
    ['a listenable controller', listenableAbortController],
    ['a plain AbortController', () => new AbortController()],
  ] as const) {
    it(`calls each listener once, after the signal aborted, on ${kind}`, () => {
      const controller = make();
      const calls: string[] = [];
      onAbort(controller.signal, () => calls.push(`a:${controller.signal.aborted}`));
      const stop = onAbort(controller.signal, () => calls.push('removed'));
      onAbort(controller.signal, () => calls.push('b'));
      stop();
      controller.abort();
      controller.abort();
      expect(calls).toEqual(['a:true', 'b']);
    });

    it(`keeps the signal a real AbortSignal on ${kind}`, () => {
      const controller = make();
      const events: string[] = [];
      controller.signal.addEventListener('abort', () => events.push('event'));
      controller.abort(new Error('gone'));
      expect(events).toEqual(['event']);
      expect((controller.signal.reason as Error).message).toBe('gone');
    });
  }

  it('LinkedAbort follows a listenable parent and stops following it once released', () => {
    const parent = listenableAbortController();
    const linked = new LinkedAbort(parent.signal);
    parent.abort();
    expect(linked.signal.aborted).toBe(true);

    const other = listenableAbortController();
    const released = new LinkedAbort(other.signal, 60_000);
    released.release();
    other.abort();
    expect(released.signal.aborted).toBe(false);
  });
});
