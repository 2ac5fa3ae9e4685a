import type { Cancellation } from '../../providers/abort.js';
import type {
  CallContext,
  InferenceProvider,
  JsonObject,
  ProviderResult,
  SseEvent,
} from '../../providers/types.js';
import { UpstreamError } from '../../providers/upstream-error.js';
import type { CatalogModel } from '../catalog.js';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import { clientGone } from './client.js';
import type { InferenceReply, InferenceRequest } from './exchange.js';
import { fromUpstream } from './upstream-errors.js';

export type ProviderCall = (
  provider: InferenceProvider,
  body: JsonObject,
  ctx: CallContext,
) => Promise<ProviderResult>;

export interface Dispatched {
  result: ProviderResult;
  provider: InferenceProvider;
  upstreamModel: string;
  /** The call's cancellation (the client went away); a stream writer aborts it to stop the upstream. */
  cancel: Cancellation;
}

export interface DispatchOptions {
  /** Events that may come before the upstream commits to an answer (held back so a fallback stays possible). */
  isPreamble?: (event: SseEvent) => boolean;
  /** Only providers that have this capability are tried (e.g. native Responses). */
  accepts?: (provider: InferenceProvider) => boolean;
}

/**
 * Tries the model's providers in order. A connect error, a timeout, a 429 or a 5xx before anything was
 * sent to the client moves on to the next, and so does a stream that broke during its preamble; a stream
 * counts as started only at its first real event.
 */
export async function dispatch(
  gantry: Gantry,
  request: InferenceRequest,
  reply: InferenceReply,
  model: CatalogModel,
  body: JsonObject,
  call: ProviderCall,
  options: DispatchOptions = {},
): Promise<Dispatched> {
  const cancel = clientGone(reply);
  const requestId = String(request.id);
  let lastError: UpstreamError | undefined;
  for (const route of model.entry.routes) {
    const provider = gantry.providers.get(route.provider);
    if (!provider || (options.accepts && !options.accepts(provider))) continue;
    const upstreamBody = body.model === route.model ? body : { ...body, model: route.model };
    // A failed attempt releases its own upstream connection (providers/http.ts), so the client's signal
    // is all an attempt needs.
    const ctx = new AttemptContext(
      cancel,
      requestId,
      upstreamBody === request.body ? request.bodyText : undefined,
    );
    let holding = false;
    try {
      let result = await call(provider, upstreamBody, ctx);
      if (result.kind === 'stream') {
        holding = true;
        result = { kind: 'stream', events: await holdPreamble(result.events, options.isPreamble) };
      }
      // The upstream has the request: its text is not needed again (see InferenceRequest.bodyText).
      if (request.bodyText !== undefined) request.bodyText = undefined;
      return { result, provider, upstreamModel: route.model, cancel };
    } catch (err) {
      if (!(err instanceof UpstreamError)) throw err;
      if (err.failure === 'aborted' || cancel.aborted) throw fromUpstream(err);
      request.log.warn(
        { provider: provider.name, failure: err.failure, status: err.status, reason: err.message },
        'upstream failed',
      );
      const metrics = gantry.services.metrics;
      metrics.upstreamErrors.inc({ provider: provider.name, failure: err.failure });
      lastError = err;
      // A stream that broke (cut, cut short, garbled) before its first real event has sent the client
      // nothing, so it is replaced like an upstream that hung up before answering.
      const brokePreamble = holding && err.failure === 'protocol';
      if (!err.retryable && !brokePreamble) break;
      metrics.fallbacks.inc({ provider: provider.name, model: model.entry.namespace });
    }
  }
  if (lastError) throw fromUpstream(lastError);
  throw new GantryError('MODEL_UNAVAILABLE', {
    message: `No provider is configured to serve ${model.entry.namespace}`,
  });
}

/** One attempt's CallContext; a class, so the `signal` getter is not made again for every attempt. */
class AttemptContext implements CallContext {
  constructor(
    readonly cancel: Cancellation,
    readonly requestId: string,
    readonly bodyText: string | undefined,
  ) {}

  get signal(): AbortSignal {
    return this.cancel.signal;
  }
}

/**
 * Reads the stream up to its first event that is not preamble, so that an upstream failing right after
 * its preamble still allows a fallback. Returns a stream that replays what was held.
 */
async function holdPreamble(
  events: AsyncIterable<SseEvent>,
  isPreamble: ((event: SseEvent) => boolean) | undefined,
): Promise<AsyncIterable<SseEvent>> {
  const it = events[Symbol.asyncIterator]();
  const held: SseEvent[] = [];
  let ended = false;
  try {
    for (;;) {
      const next = await it.next();
      if (next.done) {
        ended = true;
        break;
      }
      held.push(next.value);
      if (!isPreamble?.(next.value)) break;
    }
  } catch (err) {
    await it.return?.();
    throw err;
  }
  return new Replay(held, it, ended);
}

/**
 * The held events, then the rest of the stream straight from the provider's iterator: a plain iterator
 * rather than a generator, so an event after the preamble costs no extra promise on its way.
 */
class Replay implements AsyncIterableIterator<SseEvent> {
  private replayed = 0;

  constructor(
    private readonly held: SseEvent[],
    private readonly it: AsyncIterator<SseEvent>,
    private ended: boolean,
  ) {}

  [Symbol.asyncIterator](): AsyncIterableIterator<SseEvent> {
    return this;
  }

  next(): Promise<IteratorResult<SseEvent>> {
    const held = this.held;
    if (this.replayed < held.length) {
      const value = held[this.replayed++] as SseEvent;
      // Replayed in full: the stream need not keep them for the rest of its life.
      if (this.replayed === held.length) {
        held.length = 0;
        this.replayed = 0;
      }
      return Promise.resolve({ done: false, value });
    }
    if (this.ended) return Promise.resolve({ done: true, value: undefined });
    return this.it.next();
  }

  /** The consumer stopped early (client gone): let the provider release its upstream connection. */
  async return(): Promise<IteratorResult<SseEvent>> {
    // Nothing held is handed out after the consumer stopped.
    this.held.length = 0;
    if (!this.ended) {
      this.ended = true;
      await this.it.return?.();
    }
    return { done: true, value: undefined };
  }
}
