/**
 * An AbortController that follows a parent signal, and optionally a deadline. It replaces
 * `AbortSignal.any`/`AbortSignal.timeout`, which are slow on Node 20 and retain memory, on the per-request
 * path: one listener and one timer, both removed by `release()` when the call is over.
 */
export class LinkedAbort {
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private readonly onParentAbort: () => void;
  /** true when the deadline, not the parent, aborted the call. */
  timedOut = false;

  constructor(
    private readonly parent: AbortSignal,
    deadlineMs?: number,
  ) {
    this.onParentAbort = () => this.controller.abort(parent.reason);
    if (parent.aborted) {
      this.controller.abort(parent.reason);
      return;
    }
    parent.addEventListener('abort', this.onParentAbort, { once: true });
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
    this.parent.removeEventListener('abort', this.onParentAbort);
  }
}
