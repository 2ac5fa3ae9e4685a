import type { ServerResponse } from 'node:http';
import type { Cancellation } from '../../providers/abort.js';
import { formatSse } from '../../providers/sse.js';
import type { SseEvent } from '../../providers/types.js';
import { UpstreamError } from '../../providers/upstream-error.js';
import { toGantryError } from '../error-handler.js';
import { envelope, envelopeFor, type GantryError } from '../errors.js';
import type { InferenceReply, InferenceRequest } from './exchange.js';
import { fromUpstream } from './upstream-errors.js';
import type { StreamMeter } from './usage-capture.js';

export interface StreamOptions {
  /** The upstream call's cancellation: aborted when the stream is ended from outside (endStreams). */
  cancel: Cancellation;
  /** Chat streams end with `data: [DONE]`; Responses streams end at their terminal event. */
  writeDone: boolean;
  /** Watches each event first (usage, time to first token) and may drop it (a usage chunk not asked for). */
  meter?: StreamMeter;
  /** Rewrites an event on its way out (e.g. the upstream model name); identity when absent. */
  transform?: (event: SseEvent) => SseEvent;
  /** The event that reports a mid-stream failure; defaults to `data: {"error": …}` as chat streams do. */
  errorEvent?: (err: GantryError, eventsWritten: number) => SseEvent;
  /** Told when the upstream broke mid-stream (the response itself still ends cleanly). */
  onFailure?: () => void;
}

const DONE = 'data: [DONE]\n\n';

/**
 * Streams being written (inference streams here, prediction and forwarded streams through trackStream),
 * so a shutdown can end each one properly (endStreams).
 */
const running = new Set<(err: GantryError) => void>();

/**
 * Registers a stream written elsewhere: `end` is called with the error if the stream is still running
 * when endStreams runs; it must end the response at once and stop the stream's upstream work. Returns
 * what removes it (call it when the stream is over).
 */
export function trackStream(end: (err: GantryError) => void): () => void {
  running.add(end);
  return () => running.delete(end);
}

/**
 * The Connection header of a stream answer: keep-alive, unless the client asked to close (then Node
 * closes the socket once the answer has ended).
 */
export function connectionFor(headers: { readonly connection?: string | undefined }): 'close' | 'keep-alive' {
  const asked = headers.connection;
  return asked !== undefined && /(?:^|,)\s*close\s*(?:,|$)/i.test(asked) ? 'close' : 'keep-alive';
}

/**
 * Ends every stream still being written with `err` as its mid-stream error event and a clean end of the
 * response (what an upstream failure gives), e.g. at the shutdown deadline. Returns how many it ended.
 */
export function endStreams(err: GantryError): number {
  const ends = [...running];
  for (const end of ends) end(err);
  return ends.length;
}

/**
 * Writes an SSE stream to the client. If the upstream breaks mid-stream, the client gets one error event
 * in the inference envelope and a clean end of the response: never a hang, never a half-written event.
 */
export async function sendStream(
  request: InferenceRequest,
  reply: InferenceReply,
  events: AsyncIterable<SseEvent>,
  options: StreamOptions,
): Promise<void> {
  reply.hijack();
  const res = reply.raw;
  // Headers set on the reply before the stream (rate limits) go out with it.
  res.writeHead(200, {
    ...(reply.getHeaders() as Record<string, string>),
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: connectionFor(request.headers),
    'x-request-id': String(request.id),
    'x-accel-buffering': 'no',
  });
  const { meter, transform } = options;
  const out = new TickWriter(res);
  let outcome = 'ok';
  let written = 0;
  const errorEvent = (gantryError: GantryError): SseEvent =>
    options.errorEvent
      ? options.errorEvent(gantryError, written)
      : { data: JSON.stringify(envelope(envelopeFor(request.url), gantryError)) };
  // Ended from outside (endStreams): the event and the end are written at once, whatever the upstream is
  // doing, and the upstream call is aborted, so the read loop stops now rather than at its next event
  // (an upstream gone silent would otherwise hold its connection, and the shutdown, open).
  let endedBy: GantryError | undefined;
  const end = (gantryError: GantryError): void => {
    if (endedBy !== undefined || res.destroyed || res.writableEnded) return;
    endedBy = gantryError;
    request.errorId = gantryError.errorId;
    options.onFailure?.();
    out.write(formatSse(errorEvent(gantryError)));
    out.end();
    options.cancel.abort();
  };
  running.add(end);
  try {
    for await (const event of events) {
      if (res.destroyed || endedBy !== undefined) break;
      const seen = meter === undefined ? event : meter.see(event);
      if (seen === undefined) continue;
      written++;
      out.write(formatSse(transform ? transform(seen) : seen));
      if (res.writableNeedDrain) await drained(res);
    }
    if (endedBy !== undefined) outcome = 'shutdown';
    else if (res.destroyed) outcome = 'client_aborted';
    else if (options.writeDone) out.write(DONE);
  } catch (err) {
    if (endedBy !== undefined) {
      outcome = 'shutdown';
    } else if (res.destroyed) {
      outcome = 'client_aborted';
    } else {
      const gantryError = err instanceof UpstreamError ? fromUpstream(err) : toGantryError(err as Error);
      // The usage record names the error the client was sent (an overload, a timeout), as for JSON answers.
      request.errorId = gantryError.errorId;
      outcome = 'upstream_error';
      options.onFailure?.();
      request.log.warn({ err }, 'stream failed mid-way');
      out.write(formatSse(errorEvent(gantryError)));
    }
  } finally {
    running.delete(end);
    out.end();
    request.log.info({ method: request.method, url: request.url, status: 200, stream: outcome }, 'stream');
  }
}

/**
 * Collects the events written in one tick and sends them with one res.write when the tick is over. An
 * upstream read usually carries several events, which arrive here one after another without waiting on
 * anything: one write each would cost each its own chunked-encoding frame and its share of a writev.
 * Nothing waits longer than it did: the tick ends as soon as the stream waits for the upstream.
 */
class TickWriter {
  private pending = '';

  constructor(private readonly res: ServerResponse) {}

  write(text: string): void {
    if (this.pending === '') process.nextTick(flushTick, this);
    this.pending += text;
  }

  flush(): void {
    const text = this.take();
    if (text !== undefined && text !== '') this.res.write(text);
  }

  /** Ends the response with what is pending. */
  end(): void {
    const text = this.take();
    if (text === '') this.res.end();
    else if (text !== undefined) this.res.end(text);
  }

  /** The pending text, emptied; undefined when the response can take no more (client gone, ended). */
  private take(): string | undefined {
    const text = this.pending;
    this.pending = '';
    return this.res.destroyed || this.res.writableEnded ? undefined : text;
  }
}

function flushTick(writer: TickWriter): void {
  writer.flush();
}

/** Resolves when the client has taken what was written, or has gone. */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.removeListener('drain', done);
      res.removeListener('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
