import { once } from 'node:events';
import { formatSse } from '../../providers/sse.js';
import type { SseEvent } from '../../providers/types.js';
import { UpstreamError } from '../../providers/upstream-error.js';
import { toGantryError } from '../error-handler.js';
import { envelope, envelopeFor, type GantryError } from '../errors.js';
import type { InferenceReply, InferenceRequest } from './exchange.js';
import { fromUpstream } from './upstream-errors.js';

export interface StreamOptions {
  /** Chat streams end with `data: [DONE]`; Responses streams end at their terminal event. */
  writeDone: boolean;
  /** Rewrites an event on its way out (e.g. the upstream model name); identity when absent. */
  transform?: (event: SseEvent) => SseEvent;
  /** The event that reports a mid-stream failure; defaults to `data: {"error": …}` as chat streams do. */
  errorEvent?: (err: GantryError, eventsWritten: number) => SseEvent;
  /** Told when the upstream broke mid-stream (the response itself still ends cleanly). */
  onFailure?: () => void;
}

const DONE = 'data: [DONE]\n\n';

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
    connection: 'keep-alive',
    'x-request-id': String(request.id),
    'x-accel-buffering': 'no',
  });
  const transform = options.transform;
  let outcome = 'ok';
  let written = 0;
  try {
    for await (const event of events) {
      if (res.destroyed) break;
      written++;
      const ok = res.write(formatSse(transform ? transform(event) : event));
      if (!ok && !res.destroyed) await once(res, 'drain');
    }
    if (res.destroyed) outcome = 'client_aborted';
    else if (options.writeDone) res.write(DONE);
  } catch (err) {
    if (res.destroyed) {
      outcome = 'client_aborted';
    } else {
      const gantryError = err instanceof UpstreamError ? fromUpstream(err) : toGantryError(err as Error);
      outcome = 'upstream_error';
      options.onFailure?.();
      request.log.warn({ err }, 'stream failed mid-way');
      const event = options.errorEvent
        ? options.errorEvent(gantryError, written)
        : { data: JSON.stringify(envelope(envelopeFor(request.url), gantryError)) };
      res.write(formatSse(event));
    }
  } finally {
    if (!res.destroyed) res.end();
    request.log.info({ method: request.method, url: request.url, status: 200, stream: outcome }, 'stream');
  }
}
