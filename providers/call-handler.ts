import type { Dispatcher } from 'undici';
import { type AbortSource, onAbort } from './abort.js';

/** What every call through undici's dispatch API needs (json-call.ts, stream-call.ts). */
export interface CallOptions {
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  headers: Record<string, string>;
  body: string | undefined;
  /** Aborts the call when the client goes away. */
  signal: AbortSource;
  /** The whole call, body included. */
  totalMs: number;
}

/**
 * The part of a dispatch handler that ends a call early: the client's cancellation and the total deadline
 * abort it through undici's controller (or, before undici has started the request, as soon as it does).
 * The pool's own timeouts (connect, headers, body idle) apply as they do to `pool.request()`.
 */
export abstract class CallHandler implements Dispatcher.DispatchHandler {
  protected controller: Dispatcher.DispatchController | undefined;
  /** An abort that came before undici started the request (it waits in the pool's queue meanwhile). */
  private pendingAbort: Error | undefined;
  /** The total deadline, not the client, stopped the call. */
  protected timedOut = false;
  private settled = false;
  private readonly timer: NodeJS.Timeout;
  private readonly stopListening: (() => void) | undefined;

  constructor(options: CallOptions) {
    const signal = options.signal;
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.abort(new DOMException('The operation timed out', 'TimeoutError'));
    }, options.totalMs);
    if (signal.aborted) this.abort(toError(signal.reason));
    else this.stopListening = onAbort(signal, () => this.abort(toError(signal.reason)));
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.pendingAbort) controller.abort(this.pendingAbort);
  }

  abstract onResponseError(controller: Dispatcher.DispatchController, error: Error): void;

  protected abort(reason: Error): void {
    if (this.settled) return;
    if (this.controller) this.controller.abort(reason);
    else this.pendingAbort ??= reason;
  }

  /** Drops the timer and the listener; false when the call had already settled. */
  protected finish(): boolean {
    if (this.settled) return false;
    this.settled = true;
    clearTimeout(this.timer);
    this.stopListening?.();
    return true;
  }
}

/** The call's options as undici's dispatch() takes them. */
export function dispatchOptions(options: CallOptions): Dispatcher.DispatchOptions {
  return { method: options.method, path: options.path, headers: options.headers, body: options.body ?? null };
}

/**
 * Why a call whose cancellation came before it started is refused without being sent: handing it to
 * undici would still take (and then close) a keep-alive connection. undefined while not aborted.
 */
export function cancelledBefore(options: CallOptions): Error | undefined {
  return options.signal.aborted ? toError(options.signal.reason) : undefined;
}

function toError(reason: unknown): Error {
  return reason instanceof Error ? reason : new DOMException('This operation was aborted', 'AbortError');
}
