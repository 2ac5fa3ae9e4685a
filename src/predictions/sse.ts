import type { FastifyReply, FastifyRequest } from 'fastify';
import { connectionFor, trackStream } from '../inference/stream-reply.js';
import type { PredictionDeps } from './context.js';
import { isTerminal, type PredictionRecord, type PredictionStatus, type StreamEvent } from './types.js';

/** A comment line now and then keeps proxies from closing a quiet stream. */
const KEEPALIVE_MS = 15_000;
/**
 * A prediction's status turns terminal before its last stream events are written (lifecycle.finish):
 * how long after that a stream waits for its `done` before it sends one itself (the events were lost).
 */
const DONE_GRACE_MS = 2_000;

/**
 * GET /v1/predictions/{id}/stream: `output`, `logs`, `error` and `done` events. A subscriber that joins
 * late first gets every event already produced (kept in the store), then the live ones from the bus,
 * which works whichever instance runs the prediction. Events carry their seq as the SSE `id`, so the
 * replay and the live feed join without gaps or repeats. The stream ends after `done`, and every stream
 * of a finished prediction ends: one resumed at or past its `done` gets that `done` again (so an
 * EventSource stops reconnecting), and one whose `done` was never written gets one made from the status.
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
  /** The `done` event of a finished prediction, re-sent or made up: the client is told it is over. */
  const endWithDone = (status: PredictionStatus) => {
    if (ended) return;
    res.write(`id: ${lastSeq}\nevent: done\ndata: ${JSON.stringify({ status })}\n\n`);
    end();
  };
  let graceTimer: NodeJS.Timeout | undefined;
  /** Waits for the live `done` until `completedAt` + DONE_GRACE_MS, then sends one itself. */
  const awaitDone = (status: PredictionStatus, completedAt: number) => {
    if (ended || graceTimer !== undefined) return;
    const wait = Math.max(0, completedAt + DONE_GRACE_MS - Date.now());
    graceTimer = setTimeout(() => endWithDone(status), wait);
  };

  res.once('close', end);
  // At the shutdown deadline the stream ends cleanly without a `done` (the prediction is not over): the
  // client reconnects with Last-Event-ID and resumes where it was, on an instance still running.
  const untrack = trackStream(end);
  let unsubscribe: () => void = () => {};
  const keepalive = setInterval(() => res.write(': keep-alive\n\n'), KEEPALIVE_MS);
  keepalive.unref();

  try {
    unsubscribe = await deps.bus.subscribe(record.id, (message) => {
      if (message.type === 'status' && isTerminal(message.status)) awaitDone(message.status, Date.now());
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
    if (!ended) {
      const latest = await deps.store.get(record.id);
      // Deleted while we joined.
      if (!latest) end();
      else if (isTerminal(latest.status)) {
        // Finished, and the replay held no `done`: the client is past it (resumed with the id of the
        // `done`, or of no event at all), or it is still being written, or it was lost.
        const next =
          resumeFrom > 0 && lastSeq === resumeFrom
            ? await deps.store.streamEvents(record.id, lastSeq - 1)
            : [];
        const pastEnd =
          resumeFrom > 0 &&
          lastSeq === resumeFrom &&
          next.every((e) => e.seq !== lastSeq || e.event === 'done');
        if (pastEnd) endWithDone(latest.status);
        else awaitDone(latest.status, latest.completedAt ?? Date.now());
      }
    }
    await finished;
  } catch (error) {
    // Headers are sent: the stream can only end. The client reconnects with Last-Event-ID.
    request.log.warn({ err: (error as Error).message }, 'prediction stream failed');
    end();
  } finally {
    untrack();
    clearInterval(keepalive);
    clearTimeout(graceTimer);
    unsubscribe();
  }
}
