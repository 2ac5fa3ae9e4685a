import { Cancellation } from '../../providers/abort.js';
import type { InferenceReply } from './exchange.js';

/**
 * A cancellation that fires the moment the client's connection closes before the reply was fully sent,
 * so the upstream call is cancelled at once instead of running on for nobody. Its AbortSignal is made
 * only when something asks for it (providers/abort.ts).
 */
export function clientGone(reply: InferenceReply): Cancellation {
  const cancellation = new Cancellation();
  const res = reply.raw;
  // 'close' comes once per response: `on` spares the wrapper `once` allocates per request.
  res.on('close', () => {
    if (!res.writableFinished) cancellation.abort();
  });
  return cancellation;
}

/** The same as an AbortSignal. */
export function clientGoneSignal(reply: InferenceReply): AbortSignal {
  return clientGone(reply).signal;
}
