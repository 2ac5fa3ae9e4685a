import type { FastifyReply, FastifyRequest } from 'fastify';
import { connectionFor } from '../inference/stream-reply.js';
import type { PredictionDeps } from './context.js';
import type { PredictionRecord, StreamEvent } from './types.js';

/** A comment line now and then keeps proxies from closing a quiet stream. */
const KEEPALIVE_MS = 15_000;

/**
 * GET /v1/predictions/{id}/stream: `output`, `logs`, `error` and `done` events. A subscriber that joins
 * late first gets every event already produced (kept in the store), then the live ones from the bus,
 * which works whichever instance runs the prediction. Events carry their seq as the SSE `id`, so the
 * replay and the live feed join without gaps or repeats. The stream ends after `done`.
 */
export async function streamPrediction(
  deps: PredictionDeps,
  record: PredictionRecord,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<void> {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: connectionFor(request.headers),
    'x-accel-buffering': 'no',
    'x-request-id': String(request.id),
  });
  res.flushHeaders();

  let lastSeq = 0;
  let ended = false;
  let replaying = true;
  const held: StreamEvent[] = [];
  let finish: () => void = () => {};
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });

  const write = (event: StreamEvent) => {
    if (ended || event.seq <= lastSeq) return;
    lastSeq = event.seq;
    const data = event.data
      .split('\n')
      .map((line) => `data: ${line}`)
      .join('\n');
    res.write(`id: ${event.seq}\nevent: ${event.event}\n${data}\n\n`);
    if (event.event === 'done') end();
  };
  const end = () => {
    if (ended) return;
    ended = true;
    res.end();
    finish();
  };

  res.once('close', end);
  let unsubscribe: () => void = () => {};
  const keepalive = setInterval(() => res.write(': keep-alive\n\n'), KEEPALIVE_MS);
  keepalive.unref();

  try {
    unsubscribe = await deps.bus.subscribe(record.id, (message) => {
      if (message.type !== 'stream') return;
      if (replaying) held.push(message.event);
      else write(message.event);
    });
    if (ended) return;
    const resumeFrom = Number(request.headers['last-event-id']);
    lastSeq = Number.isSafeInteger(resumeFrom) && resumeFrom > 0 ? resumeFrom : 0;
    for (const event of await deps.store.streamEvents(record.id, lastSeq)) write(event);
    replaying = false;
    for (const event of held.sort((a, b) => a.seq - b.seq)) write(event);
    held.length = 0;
    // A prediction deleted while we joined, or one that ended before stream events existed.
    if (!ended) {
      const latest = await deps.store.get(record.id);
      if (!latest) end();
    }
    await finished;
  } catch (error) {
    // Headers are sent: the stream can only end. The client reconnects with Last-Event-ID.
    request.log.warn({ err: (error as Error).message }, 'prediction stream failed');
    end();
  } finally {
    clearInterval(keepalive);
    unsubscribe();
  }
}
