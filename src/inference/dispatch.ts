import { Cancellation } from '../../providers/abort.js';
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
import { NORMAL, type Permit, REFUSED } from '../routing/breaker.js';
import type { Deployment } from '../routing/health.js';
import { apiOfUrl, arrivalOf, OVERHEAD_HEADER } from '../routing/overhead.js';
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
 * Tries the model's deployments in the order its routing strategy gives (src/routing). A deployment whose
 * circuit is open is skipped without a connection attempt; when every one is, the call fails at once with
 * 503 MODEL_UNAVAILABLE and a Retry-After (seconds until the next half-open trial). A connect error, a
 * timeout, a 429 or a 5xx (529 included) before anything was sent to the client moves on to the next,
 * and so does a stream that broke during its preamble or stayed silent before its first token for the
 * model's `first_token_ms`; a stream counts as started only at its first real event. Each attempt's
 * outcome feeds its deployment's health.
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
  const routing = gantry.routing.of(model.entry.namespace);
  if (!routing) throw noProvider(model);
  const firstTokenMs = body.stream === true ? routing.settings.firstTokenMs : undefined;
  let lastError: UpstreamError | undefined;
  let skipped = 0;
  let upstreamMs = 0;
  for (const deployment of routing.order(Date.now())) {
    const provider = gantry.providers.get(deployment.provider);
    if (!provider || (options.accepts && !options.accepts(provider))) continue;
    const permit = deployment.begin(Date.now());
    if (permit === REFUSED) {
      skipped++;
      continue;
    }
    const route = deployment.upstreamModel;
    const upstreamBody = body.model === route ? body : { ...body, model: route };
    // A failed attempt releases its own upstream connection (providers/http.ts), so the client's signal
    // is all an attempt needs, unless a first-token deadline may end it alone.
    const watch = firstTokenMs === undefined ? undefined : new FirstTokenWatch(cancel, firstTokenMs);
    const attempt = new Attempt(deployment, permit);
    const ctx = new AttemptContext(
      watch === undefined ? cancel : watch.cancel,
      requestId,
      upstreamBody === request.body ? request.bodyText : undefined,
      attempt,
    );
    const attemptStart = performance.now();
    let holding = false;
    try {
      let result = await call(provider, upstreamBody, ctx);
      if (result.kind === 'stream') {
        holding = true;
        result = { kind: 'stream', events: await holdPreamble(result.events, options.isPreamble) };
        // The deadline passed in the very tick the first token came: this attempt is already aborted.
        if (watch?.fired) {
          await result.events[Symbol.asyncIterator]().return?.();
          throw silentBeforeFirstToken(provider, firstTokenMs);
        }
      }
      watch?.stop(false);
      const waited = performance.now() - attemptStart;
      upstreamMs += waited;
      deployment.succeeded(permit, Date.now(), waited);
      attempt.answered = true;
      // A stream is in flight until its response is over (or until stream rescue ends it at a break);
      // a JSON answer is already whole.
      const res = reply.raw;
      if (result.kind === 'stream' && !res.destroyed) res.on('close', () => attempt.end());
      else attempt.end();
      // The upstream has the request: its text is not needed again (see InferenceRequest.bodyText).
      if (request.bodyText !== undefined) request.bodyText = undefined;
      noteOverhead(gantry, request, reply, upstreamMs);
      return { result, provider, upstreamModel: route, cancel };
    } catch (thrown) {
      watch?.stop(true);
      upstreamMs += performance.now() - attemptStart;
      const err = watch?.fired && !cancel.aborted ? silentBeforeFirstToken(provider, firstTokenMs) : thrown;
      if (!(err instanceof UpstreamError) || err.failure === 'aborted' || cancel.aborted) {
        deployment.abandoned(permit);
        attempt.end();
        if (err instanceof UpstreamError) throw fromUpstream(err);
        throw err;
      }
      // A stream that broke (cut, cut short, garbled) before its first real event has sent the client
      // nothing, so it is replaced like an upstream that hung up before answering.
      const brokePreamble = holding && err.failure === 'protocol';
      const moveOn = err.retryable || brokePreamble;
      judgeFailure(deployment, permit, err);
      attempt.end();
      request.log.warn(
        { provider: provider.name, failure: err.failure, status: err.status, reason: err.message },
        'upstream failed',
      );
      const metrics = gantry.services.metrics;
      metrics.upstreamErrors.inc({ provider: provider.name, failure: err.failure });
      lastError = err;
      if (!moveOn) break;
      metrics.fallbacks.inc({ provider: provider.name, model: model.entry.namespace });
    }
  }
  if (lastError) {
    noteOverhead(gantry, request, reply, upstreamMs);
    throw fromUpstream(lastError);
  }
  if (skipped > 0) {
    // Every deployment is open: answer now rather than wait for one (README, "Routing and health").
    // resolveInferenceModel already answers so before any other work; this covers a circuit that
    // opened in between.
    noteOverhead(gantry, request, reply, upstreamMs);
    throw modelUnavailable(model.entry.namespace, routing.retryAfterSeconds(Date.now()));
  }
  throw noProvider(model);
}

/** 503 MODEL_UNAVAILABLE with Retry-After: every deployment of the model refuses calls for now. */
export function modelUnavailable(namespace: string, seconds: number): GantryError {
  return new GantryError('MODEL_UNAVAILABLE', {
    status: 503,
    message: `Every provider of ${namespace} is unavailable; retry after ${seconds} s`,
    headers: { 'retry-after': String(seconds) },
  });
}

/**
 * The verdict on an attempt that failed with an upstream error before anything reached the client. A
 * retryable error (connect, timeout, 429, 5xx) and a garbled answer (protocol) say the deployment is
 * unwell. 401, 403 and 404 say nothing of its health either way (a key or model name wrong on one
 * deployment): no verdict, so such an answer cannot close a half-open circuit. Any other 4xx is the
 * request's fault: the deployment answered, so it is healthy.
 */
export function judgeFailure(deployment: Deployment, permit: Permit, err: UpstreamError): void {
  const now = Date.now();
  if (err.retryable || err.failure === 'protocol') deployment.failed(permit, now);
  else if (err.status === 401 || err.status === 403 || err.status === 404) deployment.abandoned(permit);
  else deployment.succeeded(permit, now, undefined);
}

/**
 * One call on one deployment, as long as it is in flight. `end()` may be called from several places
 * (the response closing, stream rescue at a break); the in-flight count goes down once.
 */
export class Attempt {
  /** The deployment gave its first real event or answer (its verdict is given). */
  answered = false;
  private ended = false;

  constructor(
    readonly deployment: Deployment,
    readonly permit: Permit,
  ) {}

  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.deployment.end();
  }

  /** The stream broke after its first event for a cause of the upstream's own: health hears of it. */
  brokeAfterContent(): void {
    if (this.answered) this.deployment.failed(NORMAL, Date.now());
  }
}

function noProvider(model: CatalogModel): GantryError {
  return new GantryError('MODEL_UNAVAILABLE', {
    message: `No provider is configured to serve ${model.entry.namespace}`,
  });
}

/** The `x-gantry-overhead-ms` header and gantry_overhead_seconds (src/routing/overhead.ts). */
function noteOverhead(
  gantry: Gantry,
  request: InferenceRequest,
  reply: InferenceReply,
  upstreamMs: number,
): void {
  const arrived = arrivalOf(reply.raw);
  if (arrived === undefined) return;
  const ms = Math.max(0, performance.now() - arrived - upstreamMs);
  reply.headers({ [OVERHEAD_HEADER]: ms.toFixed(3) });
  gantry.services.metrics.overheadObserve(apiOfUrl(request.url), ms / 1000);
}

function silentBeforeFirstToken(provider: InferenceProvider, ms: number | undefined): UpstreamError {
  return new UpstreamError('timeout', provider.name, `${provider.name} sent no token within ${ms} ms`);
}

/**
 * An attempt's own cancellation under the client's, with the model's first-token deadline: when the
 * deadline passes before the first real event, this attempt alone is aborted and the next deployment
 * tried; the client's cancellation still reaches the upstream for the rest of the stream.
 */
export class FirstTokenWatch {
  readonly cancel = new Cancellation();
  fired = false;
  private readonly timer: NodeJS.Timeout;
  private readonly unlink: () => void;

  constructor(parent: Cancellation, ms: number) {
    this.unlink = parent.onAbort(() => this.cancel.abort());
    if (parent.aborted) this.cancel.abort();
    this.timer = setTimeout(() => {
      this.fired = true;
      this.cancel.abort();
    }, ms);
  }

  /** The first token came (keep the link: the client may still cancel), or the attempt failed. */
  stop(failed: boolean): void {
    clearTimeout(this.timer);
    if (failed) this.unlink();
  }
}

/**
 * One attempt's CallContext; a class, so the `signal` getter is not made again for every attempt. It
 * carries the attempt, so that stream rescue (which wraps the call) knows which deployment answered.
 */
export class AttemptContext implements CallContext {
  constructor(
    readonly cancel: Cancellation,
    readonly requestId: string,
    readonly bodyText: string | undefined,
    readonly attempt: Attempt | undefined,
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
