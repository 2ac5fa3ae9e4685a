import { listenableAbortController } from '../../providers/abort.js';
import type { InferenceReply } from './exchange.js';

/**
 * An AbortSignal that fires the moment the client's connection closes before the reply was fully sent,
 * so the upstream call is cancelled at once instead of running on for nobody.
 */
export function clientGoneSignal(reply: InferenceReply): AbortSignal {
  // Listenable: the upstream call (providers/json-call.ts, abort.ts) listens without EventTarget's cost.
  const controller = listenableAbortController();
  const res = reply.raw;
  res.once('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}
