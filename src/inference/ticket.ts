import type { SseEvent } from '../../providers/types.js';
import type { CatalogModel } from '../catalog.js';
import type { Gantry } from '../context.js';
import type { Lease } from '../limits/index.js';
import { computeCost, toCredits } from '../metering/pricing.js';
import type { SafetyOutcome } from '../safety/engine.js';
import { assertCredits } from '../usage/credit-check.js';
import {
  newUsageId,
  safetyUsageFields,
  type UsageApi,
  type UsageOutcome,
  usageTime,
} from '../usage/index.js';
import type { InferenceReply, InferenceRequest } from './exchange.js';
import { admitOrRefuse, bucketsFor, limitsInputTokens, quotaHeaders } from './quota.js';
import { principalOf } from './resolve.js';
import { StreamMeter, type TokenUsage } from './usage-capture.js';

/** Output tokens to reserve: the request's own maximum, else the configured default. */
export function maxOutputTokens(body: Record<string, unknown>, fallback: number): number {
  const max = body.max_completion_tokens ?? body.max_tokens ?? body.max_output_tokens;
  return typeof max === 'number' && max > 0 ? max : fallback;
}

export interface TicketRequest {
  api: UsageApi;
  model: CatalogModel;
  /**
   * Counts the estimated input tokens (tiktoken). A function rather than a number because counting is
   * the dearest step of admission (microseconds for a short prompt, growing with its length) and most
   * requests never need it: only the credit estimate of a billable model, a bucket with an input-token
   * ceiling, and the usage record of a call whose upstream reported no usage read it. openTicket wraps
   * it so that it runs at most once per request, and only for those.
   */
  countInputTokens: () => number;
  /** Output tokens reserved: the request's maximum or the model's default. */
  outputTokens: number;
  stream: boolean;
}

/**
 * One admitted inference call: it passed the credit check and the rate limits, and when the client's
 * connection closes (whatever happened) it reconciles the limits with the real usage, writes one usage
 * record and updates the metrics. Routes only fill in what they learn: provider, usage, stream meter.
 */
export class Ticket {
  provider = 'none';
  /** The upstream's usage, when it reported one. */
  usage: TokenUsage | undefined;
  /** Set for streams: counts what was delivered when the upstream's usage never came. */
  meter: StreamMeter | undefined;
  /** Set by the stream writer: a stream ends "ok" on the wire even when the upstream broke. */
  streamFailed = false;
  /**
   * Tokens of upstream calls this answer used before the one that ended it: the broken parts of a
   * rescued stream (inference/rescue.ts), each its estimated prompt plus the text it delivered. Added to
   * the last call's usage, so the record covers every call.
   */
  earlierCalls: TokenUsage | undefined;
  /** What the safety layer did (its flags go into the usage record); undefined when the policy is off. */
  safety: SafetyOutcome | undefined;
  /** true once a provider answered: a failure before that costs nothing. */
  private upstreamCalled = false;
  private readonly startedAt = performance.now();
  private finished = false;
  private leaseTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly gantry: Gantry,
    private readonly request: InferenceRequest,
    private readonly reply: InferenceReply,
    private readonly req: TicketRequest,
    private readonly lease: Lease,
    /** The memoized req.countInputTokens (see openTicket). */
    private readonly inputTokens: () => number,
  ) {}

  /** Called once, when the response is over (sent, failed or abandoned by the client). */
  finish(): void {
    if (this.finished) return;
    this.finished = true;
    if (this.leaseTimer) clearInterval(this.leaseTimer);
    const { gantry, req, reply } = this;
    const res = reply.raw;
    const latencyMs = performance.now() - this.startedAt;
    // A client that left before the answer got nothing: 499, as proxies log it, not the default 200.
    const status = res.headersSent ? res.statusCode : 499;
    const outcome: UsageOutcome = !res.writableFinished
      ? 'client_aborted'
      : this.streamFailed || status >= 400
        ? 'error'
        : 'ok';

    const used = this.tokensUsed();
    const entry = req.model.entry;
    const cost = computeCost(
      entry.pricing,
      {
        inputTokens: used.inputTokens,
        cachedInputTokens: used.cachedInputTokens,
        cacheWriteInputTokens: used.cacheWriteInputTokens,
        outputTokens: used.outputTokens,
      },
      { billable: entry.billable ?? false, modelType: entry.type },
    );
    const credits =
      cost.cost === 0 ? 0 : toCredits(cost.cost, cost.currency, gantry.config.credits.perCurrency);
    void gantry.services.limiter.release(this.lease, {
      inputTokens: used.inputTokens,
      outputTokens: used.outputTokens,
    });

    const principal = principalOf(this.request);
    const ttftMs = this.meter?.firstTokenAt === undefined ? null : this.meter.firstTokenAt - this.startedAt;
    const now = Date.now();
    gantry.services.usage.add({
      id: newUsageId(now),
      time: usageTime(now),
      account_id: principal.account.id,
      key_id: principal.key.id,
      model: entry.namespace,
      provider: this.provider,
      api: req.api,
      outcome,
      status,
      error_id: this.request.errorId ?? (this.streamFailed ? 'UPSTREAM_ERROR' : null),
      input_tokens: used.inputTokens,
      cached_input_tokens: used.cachedInputTokens,
      cache_write_input_tokens: used.cacheWriteInputTokens,
      output_tokens: used.outputTokens,
      media_units: null,
      cost: cost.cost,
      currency: cost.currency,
      credits,
      latency_ms: Math.round(latencyMs * 1000) / 1000,
      ttft_ms: ttftMs === null ? null : Math.round(ttftMs * 1000) / 1000,
      stream: req.stream,
      ...safetyUsageFields(this.safety),
    });

    const m = gantry.services.metrics;
    m.inflightAdd(req.api, -1);
    if (req.stream) m.inflightStreams.dec();
    m.inferenceDone(req.api, entry.namespace, this.provider, outcome, {
      seconds: latencyMs / 1000,
      ttftSeconds: ttftMs === null ? null : ttftMs / 1000,
      inputTokens: used.inputTokens,
      outputTokens: used.outputTokens,
      cachedInputTokens: used.cachedInputTokens,
      cacheWriteInputTokens: used.cacheWriteInputTokens,
    });
  }

  /** The meter of this call's stream, for sendStream; `keepUsage`: pass the upstream's usage chunk on. */
  streamMeter(keepUsage: boolean): StreamMeter {
    this.meter = new StreamMeter(keepUsage);
    return this.meter;
  }

  /** Meters a stream that is consumed as an iterable (the Responses bridge) rather than by sendStream. */
  meterStream(events: AsyncIterable<SseEvent>, keepUsage: boolean): AsyncIterable<SseEvent> {
    return this.streamMeter(keepUsage).wrap(events);
  }

  /** For sendStream's onFailure: the upstream broke after the stream had begun. */
  readonly markStreamFailed = (): void => {
    this.streamFailed = true;
  };

  /** The prompt's estimated tokens (tiktoken), counted once per request (for rescue.ts's broken calls). */
  estimatedInputTokens(): number {
    return this.inputTokens();
  }

  /** Notes the provider that answered (for the usage record and the metric labels). */
  servedBy(provider: string): void {
    this.provider = provider;
    this.request.labels.provider = provider;
    this.upstreamCalled = true;
  }

  /** Streams can outlive a lease: push its expiry forward while the response is open. */
  keepLeaseAlive(): void {
    const every = Math.max(1_000, Math.floor(this.lease.leaseMs / 3));
    this.leaseTimer = setInterval(() => void this.gantry.services.limiter.extend(this.lease), every);
    this.leaseTimer.unref();
  }

  private tokensUsed(): TokenUsage {
    const last = this.lastCallTokens();
    const earlier = this.earlierCalls;
    if (earlier === undefined) return last;
    return {
      inputTokens: last.inputTokens + earlier.inputTokens,
      cachedInputTokens: last.cachedInputTokens + earlier.cachedInputTokens,
      cacheWriteInputTokens: last.cacheWriteInputTokens + earlier.cacheWriteInputTokens,
      outputTokens: last.outputTokens + earlier.outputTokens,
      reported: false,
    };
  }

  private lastCallTokens(): TokenUsage {
    const reported = this.usage ?? this.meter?.usage;
    if (reported) return reported;
    if (!this.upstreamCalled)
      return {
        inputTokens: 0,
        cachedInputTokens: 0,
        cacheWriteInputTokens: 0,
        outputTokens: 0,
        reported: false,
      };
    // No usage from the upstream (cut stream, client gone): the prompt was sent, the output is what arrived.
    // The estimate: counted now unless admission already did (it is memoized).
    return {
      inputTokens: this.inputTokens(),
      cachedInputTokens: 0,
      cacheWriteInputTokens: 0,
      outputTokens: this.meter ? this.meter.countDelivered() : 0,
      reported: false,
    };
  }
}

/**
 * Admits an inference call: credits first (402), then the rate limits (429), then sets the rate-limit
 * headers. The returned ticket finishes itself when the client's connection closes.
 */
export async function openTicket(
  gantry: Gantry,
  request: InferenceRequest,
  reply: InferenceReply,
  req: TicketRequest,
): Promise<Ticket> {
  const { account } = principalOf(request);
  const entry = req.model.entry;
  const services = gantry.services;
  const inputTokens = once(req.countInputTokens);

  if (entry.billable) {
    const estimate = computeCost(
      entry.pricing,
      { inputTokens: inputTokens(), outputTokens: req.outputTokens },
      { billable: true, modelType: entry.type },
    );
    const needed = toCredits(estimate.cost, estimate.currency, gantry.config.credits.perCurrency);
    await assertCredits(services, gantry.config, account.id, needed, 'request');
  }

  const buckets = bucketsFor(gantry.config, account.tier, entry);
  const admission = await admitOrRefuse(services, {
    accountId: account.id,
    buckets,
    // Both limiters (the Redis script too) read input tokens only for buckets with an input-token
    // ceiling: without one, 0 admits, refuses, reconciles and reports exactly as the count would.
    inputTokens: limitsInputTokens(buckets) ? inputTokens() : 0,
    outputTokens: req.outputTokens,
  });
  if (admission.quota.length > 0) reply.headers(quotaHeaders(admission.quota));

  const ticket = new Ticket(gantry, request, reply, req, admission.lease, inputTokens);
  services.metrics.inflightAdd(req.api, 1);
  if (req.stream) {
    services.metrics.inflightStreams.inc();
    // A lease that holds nothing (no limited bucket, or admitted while the limiter was down) needs no renewal.
    if (admission.lease.buckets.length > 0) ticket.keepLeaseAlive();
  }
  // 'close' comes once per response: `on` spares the wrapper `once` allocates per request.
  reply.raw.on('close', () => {
    // A throw in a socket's close listener would take the process down: report it with the request.
    try {
      ticket.finish();
    } catch (err) {
      request.log.error({ err }, 'metering the finished request failed');
    }
  });
  return ticket;
}

/** `count` run on the first call only; later calls return its result (a request is counted at most once). */
function once(count: () => number): () => number {
  let value: number | undefined;
  return () => {
    value ??= count();
    return value;
  };
}
