/**
 * Abort listeners without EventTarget on the per-request path. On Node 20 an AbortSignal's
 * addEventListener + removeEventListener pair costs several microseconds; a signal made by
 * `listenableAbortController()` keeps a plain list beside it instead, which `onAbort()` uses. Any other
 * signal gets a real event listener, so both work with every AbortSignal.
 */
const kListeners = Symbol('gantry.abortListeners');

type Listenable = AbortSignal & { [kListeners]?: Array<() => void> };

/** An AbortController whose signal takes `onAbort()` listeners cheaply; they run after its own events. */
export function listenableAbortController(): AbortController {
  const controller = new AbortController();
  const listeners: Array<() => void> = [];
  (controller.signal as Listenable)[kListeners] = listeners;
  const abort = controller.abort.bind(controller);
  controller.abort = (reason?: unknown) => {
    if (controller.signal.aborted) return;
    abort(reason);
    for (const listener of listeners.splice(0)) listener();
  };
  return controller;
}

/**
 * Calls `listener` once when `signal` aborts; returns the function that stops listening. As with
 * addEventListener, a signal that has already aborted never calls it: check `signal.aborted` first.
 */
export function onAbort(signal: AbortSignal, listener: () => void): () => void {
  const listeners = (signal as Listenable)[kListeners];
  if (listeners) {
    listeners.push(listener);
    return () => {
      const at = listeners.indexOf(listener);
      if (at !== -1) listeners.splice(at, 1);
    };
  }
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
