/**
 * A synchronous Cog run: one `PUT /predictions/{id}` whose answer is the finished prediction. The run is
 * `processing` as soon as the request has been written to Cog (Cog starts the model on receipt; the
 * answer only comes when it is done).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { LinkedAbort } from '../../abort.js';
import { canceledError, LogProgress } from '../common.js';
import type { BackendContext, BackendError, BackendJob, BackendResult } from '../types.js';
import { asPrediction, type CogAnswer, type CogClient, startedNothing, timeoutError } from './client.js';
import { finalResult, type OutputShape } from './outputs.js';

export interface SyncRunOptions {
  timeoutMs: number;
  /** Registers the run's stop function for close(); returns its removal. */
  track(stop: (error: BackendError) => void): () => void;
}

export async function runSync(
  client: CogClient,
  job: BackendJob,
  ctx: BackendContext,
  shape: OutputShape,
  options: SyncRunOptions,
): Promise<BackendResult> {
  const id = job.predictionId;
  const call = new LinkedAbort(ctx.signal, options.timeoutMs);
  let stoppedBy: BackendError | undefined;
  const untrack = options.track((error) => {
    stoppedBy = error;
    call.abort();
  });
  const put = (): Promise<CogAnswer> =>
    client.send(
      'PUT',
      `/predictions/${encodeURIComponent(id)}`,
      { id, input: job.input },
      // The answer comes when the model is done: only the run's own deadline applies.
      { signal: call.signal, waitForModel: true, onSent: () => ctx.events.processing() },
    );
  let answer: CogAnswer;
  try {
    answer = await put();
    for (let waitMs = 100; answer.status === 202; waitMs = Math.min(waitMs * 2, 1_000)) {
      // Cog answers 202 to a PUT whose id still runs: an earlier attempt's, whose worker died while Cog
      // went on. Nothing can wait on it (Cog has no GET), so it is canceled and the prediction put again
      // within this attempt, rather than spending one of the prediction's attempts on it.
      await client.cancelled(id);
      await sleep(waitMs, undefined, { signal: call.signal });
      answer = await put();
    }
  } catch (err) {
    // An error status means nothing runs. A cut request (abort, deadline, lost connection) may leave it
    // running: Python Cog goes on with a synchronous prediction whose client left.
    if (call.signal.aborted || !startedNothing(err)) client.cancel(id);
    if (!call.signal.aborted) throw err;
    if (stoppedBy) throw stoppedBy;
    if (call.timedOut) throw timeoutError(options.timeoutMs);
    throw canceledError(ctx.signal);
  } finally {
    call.release();
    untrack();
  }
  const prediction = asPrediction(answer.body);
  if (typeof prediction.logs === 'string') new LogProgress(ctx.events).report(prediction.logs);
  return finalResult(prediction, shape);
}
