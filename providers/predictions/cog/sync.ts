/**
 * A synchronous Cog run: one `PUT /predictions/{id}` whose answer is the finished prediction. The run is
 * `processing` as soon as the request has been written to Cog (Cog starts the model on receipt; the
 * answer only comes when it is done).
 */
import { LinkedAbort } from '../../abort.js';
import { canceledError, LogProgress } from '../shared.js';
import { type BackendContext, BackendError, type BackendJob, type BackendResult } from '../types.js';
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
  let answer: CogAnswer;
  try {
    answer = await client.send(
      'PUT',
      `/predictions/${encodeURIComponent(id)}`,
      { id, input: job.input },
      // The answer comes when the model is done: only the run's own deadline applies.
      { signal: call.signal, waitForModel: true, onSent: () => ctx.events.processing() },
    );
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
  if (answer.status === 202) {
    // Cog answers 202 to a PUT whose id still runs (an earlier attempt's): there is nothing to wait on.
    client.cancel(id);
    throw new BackendError('the Cog server is still running an earlier attempt of this prediction', {
      retryable: true,
    });
  }
  const prediction = asPrediction(answer.body);
  if (typeof prediction.logs === 'string') new LogProgress(ctx.events).report(prediction.logs);
  return finalResult(prediction, shape);
}
