import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import { CallHandler, type CallOptions, cancelledBefore, dispatchOptions } from './call-handler.js';

export interface StreamCallOptions extends CallOptions {
  /** What iterating the body throws for a failure: `midBody` once the answer's headers had arrived. */
  mapError: (error: unknown, timedOut: boolean, midBody: boolean) => Error;
  /**
   * After the consumer stopped early: how long, and how many more bytes, the rest of the answer is read
   * and dropped so the keep-alive connection can be reused, before the connection is cut instead.
   */
  dropMs: number;
  dropLimit: number;
}

/** An answer whose headers have arrived; its body is read chunk by chunk as it comes. */
export interface StreamAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  /** Stopping early (`return()`, e.g. a `for await` left by break) drops the rest (see dropMs). */
  body: AsyncIterableIterator<Buffer>;
}

/** Bytes held for a consumer that is behind; beyond them the upstream is paused until it catches up. */
const HIGH_WATER_MARK = 64 * 1024;
const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined };

/**
 * One request whose answer is read as it arrives (streams), through undici's dispatch API: the handler
 * is itself the body's async iterator, without the Readable stream, AsyncResource, AbortControllers and
 * async generator that `pool.request()` and iterating its body cost on every call and every chunk. The
 * pool's timeouts apply as they do to `pool.request()` (the idle timeout not while the consumer is behind
 * and the upstream paused); the client's cancellation and the total deadline abort through the handler.
 * Resolves when the headers arrive; rejects, through `mapError`, when the call fails before that.
 */
export function callForStream(pool: Dispatcher, options: StreamCallOptions): Promise<StreamAnswer> {
  const cancelled = cancelledBefore(options);
  if (cancelled) return Promise.reject(options.mapError(cancelled, false, false));
  return new Promise<StreamAnswer>((resolve, reject) => {
    pool.dispatch(dispatchOptions(options), new StreamHandler(options, resolve, reject));
  });
}

type Waiter = {
  resolve: (result: IteratorResult<Buffer>) => void;
  reject: (error: Error) => void;
};

class StreamHandler extends CallHandler implements AsyncIterableIterator<Buffer> {
  private started = false;
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private waiter: Waiter | undefined;
  private ended = false;
  private failure: Error | undefined;
  /** The consumer stopped early: what still arrives is dropped. */
  private dropping = false;
  private dropped = 0;
  private dropTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly options: StreamCallOptions,
    private readonly resolveStart: (answer: StreamAnswer) => void,
    private readonly rejectStart: (error: Error) => void,
  ) {
    super(options);
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHttpHeaders,
  ): void {
    this.started = true;
    this.resolveStart({ status: statusCode, headers, body: this });
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.dropping) {
      this.dropped += chunk.length;
      if (this.dropped > this.options.dropLimit) this.abort(cutOff());
      return;
    }
    const waiter = this.waiter;
    if (waiter !== undefined) {
      this.waiter = undefined;
      waiter.resolve({ done: false, value: chunk });
      return;
    }
    this.queue.push(chunk);
    this.queued += chunk.length;
    if (this.queued >= HIGH_WATER_MARK) controller.pause();
  }

  onResponseEnd(): void {
    if (!this.finish()) return;
    this.ended = true;
    if (this.dropTimer) clearTimeout(this.dropTimer);
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.resolve(DONE);
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (!this.finish()) return;
    if (this.dropTimer) clearTimeout(this.dropTimer);
    if (!this.started) {
      this.rejectStart(this.options.mapError(error, this.timedOut, false));
      return;
    }
    // A consumer that stopped early is told nothing more.
    if (this.dropping) return;
    this.failure = this.options.mapError(error, this.timedOut, true);
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.reject(this.failure);
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<Buffer> {
    return this;
  }

  next(): Promise<IteratorResult<Buffer>> {
    if (this.queue.length > 0) {
      const chunk = this.queue.shift() as Buffer;
      this.queued -= chunk.length;
      const controller = this.controller;
      if (controller?.paused && this.queued < HIGH_WATER_MARK) controller.resume();
      return Promise.resolve({ done: false, value: chunk });
    }
    if (this.failure) return Promise.reject(this.failure);
    if (this.ended || this.dropping) return Promise.resolve(DONE);
    return new Promise<IteratorResult<Buffer>>((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  /**
   * The consumer stopped early. It has usually seen the last event (a chat stream ends at `[DONE]` just
   * before the body does): the rest is read and dropped for a short while so the keep-alive connection
   * is reused; an upstream still talking after that is cut off, so it stops spending compute on nobody.
   */
  return(): Promise<IteratorResult<Buffer>> {
    if (!this.ended && this.failure === undefined && !this.dropping) {
      this.dropping = true;
      // A next() still waiting (a consumer that stops from elsewhere) ends with the stream.
      const waiter = this.waiter;
      this.waiter = undefined;
      waiter?.resolve(DONE);
      // What was queued was already read off the socket: only what still comes counts toward dropLimit.
      this.dropped = 0;
      this.queue.length = 0;
      this.queued = 0;
      this.dropTimer = setTimeout(() => this.abort(cutOff()), this.options.dropMs);
      this.controller?.resume();
    }
    return Promise.resolve(DONE);
  }
}

function cutOff(): Error {
  return new DOMException('The rest of the answer was not wanted', 'AbortError');
}
