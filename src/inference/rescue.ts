/**
 * Mid-stream rescue of chat completion streams (README, "Stream rescue"). When a stream's upstream
 * breaks (an error, a cut, a timeout) or goes silent for the model's `stream_stall_ms` after content
 * reached the client, the answer is continued on the next route of the model marked `continuation:
 * true`: the continuation is asked to carry on from the text already delivered, sent as the start of
 * the assistant's answer, and its chunks are spliced into the stream the client is reading, so the
 * client gets one answer, one `[DONE]`.
 *
 * How each kind continues an assistant message:
 * - anthropic: a prefill, i.e. the conversation plus a final assistant message holding the delivered
 *   text. Anthropic refuses a prefill ending in whitespace, so trailing whitespace is cut off, and the
 *   same whitespace is dropped again from the start of the continuation (the client already has it).
 *   The answer holds only the new text. Prefill does not work with extended thinking, so a request
 *   with `reasoning_effort` is never continued on Anthropic.
 * - openai (vLLM): the conversation plus the final assistant message, with vLLM's chat completion
 *   extra parameters `continue_final_message: true` and `add_generation_prompt: false` (they exclude
 *   each other): the chat template leaves the last message open and the model goes on with it; the
 *   answer holds only the new text. The built-in local model (kind local) takes the same parameters.
 *
 * Only n=1 streams without logprobs and without a structured `response_format` are rescued, and only
 * while no tool call delta and no finish_reason has gone out. Nothing of this runs for models with no
 * `continuation` route and no `stream_stall_ms` (streamRescue returns undefined).
 */
import { Cancellation } from '../../providers/abort.js';
import { countCompletionTokens } from '../../providers/tokens.js';
import type { JsonObject, SseEvent } from '../../providers/types.js';
import { UpstreamError } from '../../providers/upstream-error.js';
import type { CatalogModel } from '../catalog.js';
import type { ModelEntry } from '../config/types.js';
import type { Gantry } from '../context.js';
import { REFUSED } from '../routing/breaker.js';
import type { Deployment } from '../routing/health.js';
import { Attempt, AttemptContext, judgeFailure as judgeFailureOf, type ProviderCall } from './dispatch.js';
import type { InferenceRequest } from './exchange.js';
import { CONTENT } from './preamble.js';
import type { Ticket } from './ticket.js';

/** A tool call delta (compact JSON or with spaces): the answer is no longer plain text. */
const TOOL_CALL = /"tool_calls"\s*:\s*\[\s*\{/;
/** A chunk naming a finish_reason: the answer is complete, nothing to continue. */
const FINISHED = /"finish_reason"\s*:\s*"/;
/** Kept chunk texts are reduced to their content past this size (a long answer holds no more). */
const FOLD_AT = 256 * 1024;

/** What a model's routes allow, worked out once per model. */
interface Plan {
  /** Indexes of the routes marked `continuation`. */
  continuing: number[];
  stallMs: number | undefined;
}

const plans = new WeakMap<ModelEntry, Plan | null>();

function planOf(entry: ModelEntry): Plan | null {
  let plan = plans.get(entry);
  if (plan === undefined) {
    const continuing: number[] = [];
    entry.routes.forEach((route, i) => {
      if (route.continuation === true) continuing.push(i);
    });
    plan =
      continuing.length === 0 && entry.stream_stall_ms === undefined
        ? null
        : { continuing, stallMs: entry.stream_stall_ms };
    plans.set(entry, plan);
  }
  return plan;
}

/**
 * Why a request's stream cannot be continued whatever happens, or undefined when it can. n > 1 would
 * need every choice continued at once, logprobs cannot be given for the delivered text, and a
 * structured response_format restarts its grammar (vLLM) or its answer tool (Anthropic) from scratch.
 */
export function notRescuable(body: JsonObject): string | undefined {
  if (body.stream !== true) return 'not a stream';
  if (body.n !== undefined && body.n !== null && body.n !== 1) return 'n > 1';
  if (body.logprobs === true || (body.top_logprobs !== undefined && body.top_logprobs !== null))
    return 'logprobs';
  const format = body.response_format as JsonObject | undefined | null;
  if (format && typeof format === 'object' && format.type !== 'text') return 'response_format';
  return undefined;
}

/**
 * The body that asks `kind` to continue `delivered` (what the client has of the answer), or undefined
 * when that kind cannot continue this request. `deliveredTokens` is taken off the client's output limit
 * so the whole answer stays within it. `trimmed` is the whitespace cut off the prefill (Anthropic), to
 * be dropped from the start of the continuation.
 */
export function continuationBody(
  kind: string,
  body: JsonObject,
  upstreamModel: string,
  delivered: string,
  deliveredTokens: number,
): { body: JsonObject; trimmed: string } | undefined {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const out: JsonObject = { ...body, model: upstreamModel };
  for (const field of ['max_tokens', 'max_completion_tokens'] as const) {
    const limit = body[field];
    if (typeof limit === 'number') out[field] = Math.max(1, limit - deliveredTokens);
  }
  if (kind === 'anthropic') {
    const effort = body.reasoning_effort;
    if (effort !== undefined && effort !== null && effort !== 'none') return undefined;
    const prefill = delivered.trimEnd();
    const trimmed = delivered.slice(prefill.length);
    // An empty prefill is no prefill: the model answers afresh after the whitespace the client has.
    out.messages = prefill === '' ? messages : [...messages, { role: 'assistant', content: prefill }];
    return { body: out, trimmed };
  }
  // The built-in local model takes vLLM's parameters too (providers/local/reply.ts).
  if (kind === 'openai' || kind === 'local') {
    out.messages = [...messages, { role: 'assistant', content: delivered }];
    out.continue_final_message = true;
    out.add_generation_prompt = false;
    return { body: out, trimmed: '' };
  }
  return undefined;
}

/** The first stream's identity, which every chunk the client gets carries. */
interface Identity {
  id: unknown;
  created: unknown;
  model: unknown;
}

/**
 * Rewrites a continuation's chunks into the stream the client is reading: its role chunk and anything
 * before new content (reasoning, empty deltas) are dropped, whitespace the client already has is
 * dropped from its first text, and each chunk takes the first stream's id, created and model.
 * finish_reason and the usage chunk are the continuation's own.
 */
export class ContinuationChunks {
  private started = false;

  constructor(
    private readonly identity: Identity,
    /** Whitespace at the end of the delivered text that the continuation may repeat. */
    private pendingSpace: string,
  ) {}

  /** The event as the client gets it, or undefined when it is dropped. */
  rewrite(event: SseEvent): SseEvent | undefined {
    let chunk: JsonObject;
    try {
      chunk = JSON.parse(event.data) as JsonObject;
    } catch {
      return event;
    }
    const choices = Array.isArray(chunk.choices) ? (chunk.choices as JsonObject[]) : [];
    for (const choice of choices) {
      const delta = choice.delta as JsonObject | undefined;
      if (delta && typeof delta === 'object') {
        delete delta.role;
        if (typeof delta.content === 'string') delta.content = this.dropRepeatedSpace(delta.content);
        if (!this.started) {
          const content = typeof delta.content === 'string' && delta.content !== '';
          if (!content && !Array.isArray(delta.tool_calls)) {
            // Nothing new yet: no text for the client, only the continuation's own preamble.
            for (const key of Object.keys(delta)) delete delta[key];
          }
        }
      }
      const news =
        (typeof delta?.content === 'string' && delta.content !== '') ||
        Array.isArray(delta?.tool_calls) ||
        (typeof choice.finish_reason === 'string' && choice.finish_reason !== '');
      if (news) this.started = true;
    }
    const usage = chunk.usage !== null && typeof chunk.usage === 'object';
    if (!this.started && !usage) return undefined;
    if (this.identity.id !== undefined) chunk.id = this.identity.id;
    if (this.identity.created !== undefined) chunk.created = this.identity.created;
    if (this.identity.model !== undefined) chunk.model = this.identity.model;
    return { ...event, data: JSON.stringify(chunk) };
  }

  private dropRepeatedSpace(content: string): string {
    if (this.pendingSpace === '' || content === '') return content;
    let i = 0;
    while (i < content.length && i < this.pendingSpace.length && content[i] === this.pendingSpace[i]) i++;
    // Only a repeat of the very whitespace the client has is dropped; other text ends the check.
    this.pendingSpace = i === content.length ? this.pendingSpace.slice(i) : '';
    return content.slice(i);
  }
}

/**
 * What has gone out to the client: the text of the answer (kept as chunk texts, parsed only when a
 * rescue needs it) and whether it can still be continued.
 */
export class Delivered {
  identity: Identity | undefined;
  private firstChunk: string | undefined;
  private chunks: string[] = [];
  private chunksLength = 0;
  private folded = '';
  content = false;
  toolCalls = false;
  finished = false;

  see(data: string): void {
    if (this.firstChunk === undefined && data.charCodeAt(0) === 123 /* { */) this.firstChunk = data;
    if (CONTENT.test(data)) {
      this.content = true;
      this.chunks.push(data);
      this.chunksLength += data.length;
      if (this.chunksLength > FOLD_AT) this.text();
    }
    if (!this.toolCalls && TOOL_CALL.test(data)) this.toolCalls = true;
    if (!this.finished && FINISHED.test(data)) this.finished = true;
  }

  /** Content went out and the answer is plain text that has not finished. */
  get continuable(): boolean {
    return this.content && !this.toolCalls && !this.finished;
  }

  /** The delivered text. */
  text(): string {
    let text = this.folded;
    for (const data of this.chunks) {
      try {
        const chunk = JSON.parse(data) as {
          choices?: Array<{ index?: number; delta?: { content?: unknown } }>;
        };
        for (const choice of chunk.choices ?? []) {
          if (typeof choice.delta?.content === 'string') text += choice.delta.content;
        }
      } catch {
        // not JSON: nothing of it reached the client as text
      }
    }
    this.folded = text;
    this.chunks = [];
    this.chunksLength = 0;
    return text;
  }

  /** The first chunk's id, created and model (the stream's identity for the client). */
  ids(): Identity {
    if (this.identity === undefined) {
      let parsed: JsonObject = {};
      try {
        parsed = JSON.parse(this.firstChunk ?? '{}') as JsonObject;
      } catch {
        // no identity to keep: the continuation's own stays
      }
      this.identity = { id: parsed.id, created: parsed.created, model: parsed.model };
    }
    return this.identity;
  }
}

/** No event for the model's stream_stall_ms. */
class Stalled extends Error {}

/** One upstream call whose stream is being read. */
interface Call {
  provider: string;
  /** Its deployment's place in the call (undefined when dispatch's attempt is unknown). */
  attempt: Attempt | undefined;
  iterator: AsyncIterator<SseEvent>;
  cancel: Cancellation;
  /** Where its text starts in the delivered text. */
  textStart: number;
  /** The prefill it was given (tokens of its prompt beyond the request's own). */
  prefillTokens: number;
}

/**
 * The rescue of one chat stream request. `call` goes to dispatch (it gives each attempt a cancellation
 * of its own when stalls are watched, so a stalled call can be stopped alone); `events` wraps the
 * stream dispatch returned.
 */
export class StreamRescue {
  readonly call: ProviderCall;
  /** The cancellation of the last attempt dispatch made (the one that answered). */
  private lastCancel: Cancellation | undefined;
  /** The last attempt dispatch made (the one that answered): its deployment and in-flight count. */
  private lastAttempt: Attempt | undefined;

  constructor(
    private readonly gantry: Gantry,
    private readonly request: InferenceRequest,
    private readonly model: CatalogModel,
    private readonly body: JsonObject,
    private readonly upstreamCall: ProviderCall,
    private readonly ticket: Ticket,
    private readonly plan: Plan,
  ) {
    this.call = (provider, body, ctx) => {
      const attempt = ctx instanceof AttemptContext ? ctx.attempt : undefined;
      this.lastAttempt = attempt;
      const parent = ctx.cancel;
      if (plan.stallMs === undefined || parent === undefined) return upstreamCall(provider, body, ctx);
      const cancel = childOf(parent);
      this.lastCancel = cancel;
      return upstreamCall(provider, body, new AttemptContext(cancel, ctx.requestId, ctx.bodyText, attempt));
    };
  }

  /** The stream the client gets: `first`, continued on the next continuation route when it breaks. */
  async *events(
    first: AsyncIterable<SseEvent>,
    served: { provider: string; upstreamModel: string; cancel: Cancellation },
  ): AsyncGenerator<SseEvent> {
    const delivered = new Delivered();
    const tried = new Set<Deployment>();
    let call: Call = {
      provider: served.provider,
      attempt: this.lastAttempt,
      iterator: first[Symbol.asyncIterator](),
      cancel: this.lastCancel ?? served.cancel,
      textStart: 0,
      prefillTokens: 0,
    };
    if (call.attempt) tried.add(call.attempt.deployment);
    let rewriter: ContinuationChunks | undefined;
    let held: SseEvent[] = [];
    let finished = false;
    try {
      for (;;) {
        try {
          for (const event of held) {
            delivered.see(event.data);
            yield event;
          }
          held = [];
          for (;;) {
            const next = await this.next(call);
            if (next.done) {
              finished = true;
              return;
            }
            const event = rewriter ? rewriter.rewrite(next.value) : next.value;
            if (event === undefined) continue;
            delivered.see(event.data);
            yield event;
          }
        } catch (err) {
          const broken = this.brokenBy(err, call, served.cancel);
          // The broken call is over: its deployment no longer has it in flight, and a break the
          // upstream caused (not the client leaving) counts against its health. A stream that ended a
          // tool call or named its finish_reason is not judged: it may have been the answer's own end.
          call.attempt?.end();
          const upstreamFault =
            broken instanceof UpstreamError && broken.failure !== 'aborted' && !served.cancel.aborted;
          if (upstreamFault && !delivered.toolCalls && !delivered.finished) call.attempt?.brokeAfterContent();
          const text = delivered.continuable ? delivered.text() : undefined;
          const rescued =
            text === undefined
              ? undefined
              : await this.continueOn(call, delivered, text, served.cancel, broken, tried);
          if (rescued === undefined) {
            this.meterUnreportedPrefill(call);
            throw broken;
          }
          call = rescued.call;
          rewriter = rescued.rewriter;
          held = rescued.held;
        }
      }
    } finally {
      // The client went away or the stream was ended from outside: let the upstream go.
      if (!finished) void Promise.resolve(call.iterator.return?.()).catch(() => undefined);
      // A continuation's in-flight count ends with the stream (dispatch's own ends when the response
      // closes, and again here is harmless: end() counts once).
      call.attempt?.end();
    }
  }

  /** The next event of `call`, or Stalled after stream_stall_ms without one. */
  private next(call: Call): Promise<IteratorResult<SseEvent>> {
    const stallMs = this.plan.stallMs;
    if (stallMs === undefined) return call.iterator.next();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Stalled()), stallMs);
      call.iterator.next().then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err);
        },
      );
    });
  }

  /**
   * What a stream broke with: a stall becomes an upstream timeout, and stops its call (when the call has
   * a cancellation of its own: never the client's, which the continuation needs).
   */
  private brokenBy(err: unknown, call: Call, client: Cancellation): unknown {
    if (!(err instanceof Stalled)) return err;
    if (call.cancel !== client) call.cancel.abort();
    void Promise.resolve(call.iterator.return?.()).catch(() => undefined);
    return new UpstreamError(
      'timeout',
      call.provider,
      `${call.provider} sent nothing for ${this.plan.stallMs} ms (stream_stall_ms)`,
    );
  }

  /**
   * Tries the model's continuation deployments other than those already tried, in the order its
   * routing strategy gives now, each under its circuit breaker: an open one is passed over without a
   * connection attempt, and each attempt's outcome feeds its deployment's health, as in dispatch. Each
   * is read up to its first new event, within the model's `first_token_ms` (a continuation that fails or
   * stays silent before that moves on to the next). Returns the call that continues, or undefined when
   * none could.
   */
  private async continueOn(
    broke: Call,
    delivered: Delivered,
    text: string,
    client: Cancellation,
    err: unknown,
    tried: Set<Deployment>,
  ): Promise<{ call: Call; rewriter: ContinuationChunks; held: SseEvent[] } | undefined> {
    if (!(err instanceof UpstreamError) || err.failure === 'aborted' || client.aborted) return undefined;
    if (this.plan.continuing.length === 0) return undefined;
    const { gantry, request, model } = this;
    const routing = gantry.routing.of(model.entry.namespace);
    if (routing === undefined) return undefined;
    const metrics = gantry.services.metrics;
    const routes = model.entry.routes;
    const callText = text.slice(broke.textStart);
    const deliveredTokens = countCompletionTokens(text);
    const firstTokenMs = routing.settings.firstTokenMs;
    let counted = false;
    for (const deployment of routing.order(Date.now())) {
      if (tried.has(deployment) || routes[deployment.index]?.continuation !== true) continue;
      const provider = gantry.providers.get(deployment.provider);
      if (!provider) continue;
      const asked = continuationBody(
        provider.kind,
        this.body,
        deployment.upstreamModel,
        text,
        deliveredTokens,
      );
      if (asked === undefined) continue;
      const permit = deployment.begin(Date.now());
      if (permit === REFUSED) continue;
      tried.add(deployment);
      const attempt = new Attempt(deployment, permit);
      if (!counted) {
        // Counted as dispatch counts a fallback: the failure of the provider that broke, then the move.
        metrics.upstreamErrors.inc({ provider: broke.provider, failure: err.failure });
        metrics.fallbacks.inc({ provider: broke.provider, model: model.entry.namespace });
        counted = true;
      }
      const cancel = childOf(client);
      const rewriter = new ContinuationChunks(delivered.ids(), asked.trimmed);
      // The same first-token deadline as a first attempt: a continuation silent for it is given up.
      let silent = false;
      const deadline =
        firstTokenMs === undefined
          ? undefined
          : setTimeout(() => {
              silent = true;
              cancel.abort();
            }, firstTokenMs);
      const started = performance.now();
      let iterator: AsyncIterator<SseEvent> | undefined;
      try {
        const result = await this.upstreamCall(
          provider,
          asked.body,
          new AttemptContext(cancel, String(request.id), undefined, attempt),
        );
        if (result.kind !== 'stream') throw new UpstreamError('protocol', provider.name, 'not a stream');
        iterator = result.events[Symbol.asyncIterator]();
        const call: Call = {
          provider: provider.name,
          attempt,
          iterator,
          cancel,
          textStart: text.length,
          prefillTokens: deliveredTokens,
        };
        // Held up to the first event the client gets, so a continuation failing before it is replaced.
        const held: SseEvent[] = [];
        for (;;) {
          const next = await this.next(call);
          if (next.done) break;
          const event = rewriter.rewrite(next.value);
          if (event === undefined) continue;
          held.push(event);
          break;
        }
        clearTimeout(deadline);
        if (silent) throw new Stalled();
        deployment.succeeded(permit, Date.now(), performance.now() - started);
        attempt.answered = true;
        this.meterBrokenCall(broke, callText);
        this.ticket.servedBy(provider.name);
        request.log.warn(
          {
            provider: broke.provider,
            failure: err.failure,
            continuedBy: provider.name,
            deliveredChars: text.length,
          },
          'stream rescued',
        );
        return { call, rewriter, held };
      } catch (failed) {
        clearTimeout(deadline);
        if (failed instanceof Stalled) cancel.abort();
        if (iterator) void Promise.resolve(iterator.return?.()).catch(() => undefined);
        if (client.aborted) {
          deployment.abandoned(permit);
          attempt.end();
          return undefined;
        }
        // Whatever stopped this continuation (its upstream failed or stalled, or the adapter refused the
        // request, e.g. a parameter Anthropic does not take), the next route may still continue.
        const timedOut = silent || failed instanceof Stalled;
        if (timedOut || (failed instanceof UpstreamError && failed.failure !== 'aborted')) {
          const failure = timedOut ? 'timeout' : (failed as UpstreamError).failure;
          if (timedOut) deployment.failed(permit, Date.now());
          else judgeFailureOf(deployment, permit, failed as UpstreamError);
          metrics.upstreamErrors.inc({ provider: provider.name, failure });
          request.log.warn({ provider: provider.name, failure }, 'stream continuation failed');
        } else {
          // Refused before any call (the adapter's own check): nothing said of the deployment's health.
          deployment.abandoned(permit);
          request.log.warn({ provider: provider.name, err: failed }, 'stream continuation refused');
        }
        attempt.end();
      }
    }
    return undefined;
  }

  /**
   * A continuation that broke for good reported no usage: the ticket estimates its prompt as the
   * request's own, so the prefill it was also sent is added here.
   */
  private meterUnreportedPrefill(call: Call): void {
    const ticket = this.ticket;
    if (call.prefillTokens === 0 || ticket.usage !== undefined || ticket.meter?.usage !== undefined) return;
    const earlier = ticket.earlierCalls;
    if (earlier) ticket.earlierCalls = { ...earlier, inputTokens: earlier.inputTokens + call.prefillTokens };
  }

  /**
   * The broken call's share of the usage record: its prompt as estimated (the request's own, plus the
   * prefill it was given) and the text it delivered, counted as the meter counts a broken stream. The
   * meter then starts over, so what it counts later is the continuation's alone.
   */
  private meterBrokenCall(broke: Call, callText: string): void {
    const ticket = this.ticket;
    const earlier = ticket.earlierCalls;
    const input = ticket.estimatedInputTokens() + broke.prefillTokens;
    const output = callText === '' ? 0 : countCompletionTokens(callText);
    ticket.earlierCalls = {
      inputTokens: (earlier?.inputTokens ?? 0) + input,
      cachedInputTokens: earlier?.cachedInputTokens ?? 0,
      cacheWriteInputTokens: earlier?.cacheWriteInputTokens ?? 0,
      outputTokens: (earlier?.outputTokens ?? 0) + output,
      reported: false,
    };
    ticket.meter?.restart();
  }
}

/**
 * The rescue of a chat request's stream, or undefined when the model has no continuation route and no
 * stall limit, or the request cannot be rescued (notRescuable): then the pipeline is exactly as without.
 */
export function streamRescue(
  gantry: Gantry,
  request: InferenceRequest,
  model: CatalogModel,
  body: JsonObject,
  call: ProviderCall,
  ticket: Ticket,
): StreamRescue | undefined {
  if (body.stream !== true) return undefined;
  const plan = planOf(model.entry);
  if (plan === null) return undefined;
  // A request that can never be continued still gets the stall check, without continuation routes.
  const usable = notRescuable(body) === undefined ? plan : { continuing: [], stallMs: plan.stallMs };
  if (usable.continuing.length === 0 && usable.stallMs === undefined) return undefined;
  return new StreamRescue(gantry, request, model, body, call, ticket, usable);
}

/** A cancellation of its own that the client's (or a shutdown's) abort also fires. */
function childOf(parent: Cancellation): Cancellation {
  const child = new Cancellation();
  if (parent.aborted) child.abort();
  else parent.onAbort(() => child.abort());
  return child;
}
