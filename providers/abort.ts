/**
 * Abort listeners without EventTarget on the per-request path. On Node 20 making an AbortController
 * and an addEventListener + removeEventListener pair on its signal cost several microseconds each
 * request. A `Cancellation` makes its AbortSignal only when something asks for one (streams, local
 * models), and `onAbort()` listens to it, or to its signal, with a plain list. Any other AbortSignal
 * gets a real event listener, so `onAbort()` works with every signal.
 */
const kListeners = Symbol('gantry.abortListeners');

type Listenable = AbortSignal & { [kListeners]?: Array<() => void> };

/** What may be listened to with `onAbort()`. */
export type AbortSource = AbortSignal | Cancellation;

/** A cancellation (the client went away), cheap while nobody needs it as an AbortSignal. */
export class Cancellation {
  private controller: AbortController | undefined;
  private readonly listeners: Array<() => void> = [];
  private done = false;

  get aborted(): boolean {
    return this.done;
  }

  /** Why it aborted, as AbortSignal.reason would say (undefined while not aborted). */
  get reason(): unknown {
    return this.done ? this.signal.reason : undefined;
  }

  /** A real AbortSignal, made on first use, aborted with the cancellation; `onAbort()` on it is cheap. */
  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      (this.controller.signal as Listenable)[kListeners] = this.listeners;
      if (this.done) this.controller.abort();
    }
    return this.controller.signal;
  }

  /** Aborts once: the signal's own event listeners first, then those added with `onAbort()`. */
  abort(): void {
    if (this.done) return;
    this.done = true;
    this.controller?.abort();
    for (const listener of this.listeners.splice(0)) listener();
  }

  /** Calls `listener` once when it aborts (never, if it already has); returns what stops listening. */
  onAbort(listener: () => void): () => void {
    return addTo(this.listeners, listener);
  }
}

function addTo(listeners: Array<() => void>, listener: () => void): () => void {
  listeners.push(listener);
  return () => {
    const at = listeners.indexOf(listener);
    if (at !== -1) listeners.splice(at, 1);
  };
}

/**
 * Calls `listener` once when `source` aborts; returns the function that stops listening. As with
 * addEventListener, a source that has already aborted never calls it: check `aborted` first.
 */
export function onAbort(source: AbortSource, listener: () => void): () => void {
  if (source instanceof Cancellation) return source.onAbort(listener);
  const listeners = (source as Listenable)[kListeners];
  if (listeners) return addTo(listeners, listener);
  const signal = source;
  signal.addEventListener('abort', listener, { once: true });
  return () => signal.removeEventListener('abort', listener);
}

/**
 * An AbortController that follows a parent signal, and optionally a deadline. It replaces
 * `AbortSignal.any`/`AbortSignal.timeout`, which are slow on Node 20 and retain memory, on the per-request
 * path: one listener and one timer, both removed by `release()` when the call is over.
 */
export class LinkedAbort {
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private readonly stopListening: (() => void) | undefined;
  /** true when the deadline, not the parent, aborted the call. */
  timedOut = false;

  constructor(parent: AbortSignal, deadlineMs?: number) {
    if (parent.aborted) {
      this.controller.abort(parent.reason);
      return;
    }
    this.stopListening = onAbort(parent, () => this.controller.abort(parent.reason));
    if (deadlineMs !== undefined) {
      this.timer = setTimeout(() => {
        this.timedOut = true;
        this.controller.abort(new DOMException('The operation timed out', 'TimeoutError'));
      }, deadlineMs);
    }
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  abort(): void {
    this.controller.abort();
  }

  /** Drops the listener and the timer; the signal stays as it is. */
  release(): void {
    if (this.timer) clearTimeout(this.timer);
    this.stopListening?.();
  }
}
