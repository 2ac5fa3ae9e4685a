import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import {
  type CountChild,
  counterChild,
  type GaugeChild,
  gaugeChild,
  histogramChild,
  type ObserveChild,
} from './metric-children.js';

/**
 * Gantry's Prometheus metrics. Names follow the OpenTelemetry GenAI semantic conventions where one exists
 * (gen_ai_client_token_usage, gen_ai_server_request_duration_seconds,
 * gen_ai_server_time_to_first_token_seconds). Labels take only bounded values: route patterns, catalogue
 * model names, provider names, statuses, error ids. Never a key, an account or a user.
 */

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const OVERHEAD_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1];
const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576];

export class Metrics {
  readonly registry = new Registry();

  readonly requests = new Counter({
    name: 'gantry_http_requests_total',
    help: 'HTTP requests by route, model, provider and status',
    labelNames: ['route', 'method', 'status', 'model', 'provider'] as const,
    registers: [this.registry],
  });

  readonly requestDuration = new Histogram({
    name: 'gantry_http_request_duration_seconds',
    help: 'HTTP request duration (until the last byte for streams)',
    labelNames: ['route', 'status', 'model', 'provider'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly genAiDuration = new Histogram({
    name: 'gen_ai_server_request_duration_seconds',
    help: 'GenAI operation duration (OpenTelemetry gen_ai.server.request.duration)',
    labelNames: [
      'gen_ai_operation_name',
      'gen_ai_request_model',
      'gen_ai_provider_name',
      'error_type',
    ] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly timeToFirstToken = new Histogram({
    name: 'gen_ai_server_time_to_first_token_seconds',
    help: 'Time to the first streamed token (OpenTelemetry gen_ai.server.time_to_first_token)',
    labelNames: ['gen_ai_operation_name', 'gen_ai_request_model', 'gen_ai_provider_name'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly tokenUsage = new Histogram({
    name: 'gen_ai_client_token_usage',
    help: 'Tokens per request by direction (OpenTelemetry gen_ai.client.token.usage)',
    labelNames: [
      'gen_ai_operation_name',
      'gen_ai_request_model',
      'gen_ai_provider_name',
      'gen_ai_token_type',
    ] as const,
    buckets: TOKEN_BUCKETS,
    registers: [this.registry],
  });

  readonly tokens = new Counter({
    name: 'gantry_tokens_total',
    help: 'Tokens processed, by direction (input, output, cached_input, cache_write)',
    labelNames: ['model', 'provider', 'direction'] as const,
    registers: [this.registry],
  });

  readonly overhead = new Histogram({
    name: 'gantry_overhead_seconds',
    help: "Gantry's own time per request: total minus the time spent waiting on the upstream",
    labelNames: ['route'] as const,
    buckets: OVERHEAD_BUCKETS,
    registers: [this.registry],
  });

  readonly rateLimited = new Counter({
    name: 'gantry_rate_limit_rejections_total',
    help: 'Requests refused by a rate limit, by the metric that ran out and the bucket scope',
    labelNames: ['metric', 'scope'] as const,
    registers: [this.registry],
  });

  readonly upstreamErrors = new Counter({
    name: 'gantry_upstream_errors_total',
    help: 'Failed upstream calls by provider and failure kind',
    labelNames: ['provider', 'failure'] as const,
    registers: [this.registry],
  });

  readonly fallbacks = new Counter({
    name: 'gantry_fallbacks_total',
    help: 'Moves to the next provider after a failure, by the provider that failed',
    labelNames: ['provider', 'model'] as const,
    registers: [this.registry],
  });

  readonly inflight = new Gauge({
    name: 'gantry_inflight_requests',
    help: 'Requests in progress',
    labelNames: ['route'] as const,
    registers: [this.registry],
  });

  readonly inflightStreams = new Gauge({
    name: 'gantry_inflight_streams',
    help: 'SSE streams in progress',
    registers: [this.registry],
  });

  readonly limiterUp = new Gauge({
    name: 'gantry_limiter_up',
    help: '1 when the rate limiter backend answers, 0 when it is unreachable',
    labelNames: ['backend'] as const,
    registers: [this.registry],
  });

  readonly limiterFailures = new Counter({
    name: 'gantry_limiter_unavailable_total',
    help: 'Admissions decided by the failure policy because the limiter backend was unreachable',
    labelNames: ['policy'] as const,
    registers: [this.registry],
  });

  readonly usageSinkUp = new Gauge({
    name: 'gantry_usage_sink_up',
    help: '1 when the last write to the usage sink succeeded',
    labelNames: ['sink'] as const,
    registers: [this.registry],
  });

  readonly usagePending = new Gauge({
    name: 'gantry_usage_records_pending',
    help: 'Usage records waiting to be written',
    registers: [this.registry],
  });

  readonly predictions = new Counter({
    name: 'gantry_predictions_total',
    help: 'Predictions that reached a terminal status',
    labelNames: ['model', 'status'] as const,
    registers: [this.registry],
  });

  readonly predictionDuration = new Histogram({
    name: 'gantry_prediction_duration_seconds',
    help: 'Creation to terminal status of predictions',
    labelNames: ['model', 'status'] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600],
    registers: [this.registry],
  });

  readonly webhookAttempts = new Counter({
    name: 'gantry_webhook_attempts_total',
    help: 'Webhook delivery attempts by outcome (delivered, retry, rejected, gave_up)',
    labelNames: ['event', 'outcome'] as const,
    registers: [this.registry],
  });

  readonly webhookLatency = new Histogram({
    name: 'gantry_webhook_delivery_seconds',
    help: 'From the status change to the successful delivery of its webhook',
    labelNames: ['event'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 300, 3600],
    registers: [this.registry],
  });

  readonly webhooksFailed = new Counter({
    name: 'gantry_webhook_deliveries_failed_total',
    help: 'Webhook deliveries given up (permanent rejection or retry span exhausted)',
    labelNames: ['event'] as const,
    registers: [this.registry],
  });

  readonly safetyChecks = new Counter({
    name: 'gantry_safety_checks_total',
    help: 'Safety checks by API, stage (prompt, completion), classifier and outcome (clean, flagged, blocked, error)',
    labelNames: ['api', 'stage', 'classifier', 'outcome'] as const,
    registers: [this.registry],
  });

  readonly safetyFlags = new Counter({
    name: 'gantry_safety_flags_total',
    help: 'Categories over their policy threshold, by API, stage and category (blocked or only annotated)',
    labelNames: ['api', 'stage', 'category', 'action'] as const,
    registers: [this.registry],
  });

  readonly safetyCheckDuration = new Histogram({
    name: 'gantry_safety_check_duration_seconds',
    help: 'Time one safety check took, by classifier',
    labelNames: ['classifier'] as const,
    buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.05, 0.25, 1, 5],
    registers: [this.registry],
  });

  readonly deploymentState = new Gauge({
    name: 'gantry_deployment_state',
    help: "A deployment's circuit breaker: 0 closed, 1 half-open, 2 open",
    labelNames: ['model', 'provider', 'upstream_model'] as const,
    registers: [this.registry],
  });

  readonly breakerTransitions = new Counter({
    name: 'gantry_breaker_transitions_total',
    help: 'Circuit breaker state changes of a deployment, by the state it moved to',
    labelNames: ['model', 'provider', 'upstream_model', 'to'] as const,
    registers: [this.registry],
  });

  readonly deploymentTtfb = new Histogram({
    name: 'gantry_deployment_ttfb_seconds',
    help: "A deployment's time to first byte: to the first token of a stream, to the whole answer of JSON",
    labelNames: ['model', 'provider', 'upstream_model'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly modelStatus = new Gauge({
    name: 'gantry_model_status',
    help: "A model's derived status: 0 operational, 1 degraded, 2 offline",
    labelNames: ['model'] as const,
    registers: [this.registry],
  });

  constructor(options: { processMetrics?: boolean } = {}) {
    if (options.processMetrics !== false) collectDefaultMetrics({ register: this.registry });
  }

  // prom-client hashes label objects on every call, children included; the request path keeps, for each
  // (bounded) label combination, children that update the stored value directly (metric-children.ts).
  private readonly requestChildren = new Map<string, RequestChildren>();
  private readonly inferenceChildren = new Map<string, InferenceChildren>();
  private readonly inflightChildren = new Map<string, GaugeChild>();
  private readonly overheadChildren = new Map<string, ObserveChild>();
  private readonly safetyCheckChildren = new Map<string, CountChild>();
  private readonly safetyDurationChildren = new Map<string, ObserveChild>();

  /** One safety check (README, "Safety" metrics): counted by outcome, timed by classifier. */
  safetyCheckDone(api: string, stage: string, classifier: string, outcome: string, seconds: number): void {
    const key = `${api}\u0000${stage}\u0000${classifier}\u0000${outcome}`;
    let count = this.safetyCheckChildren.get(key);
    if (!count) {
      count = counterChild(this.safetyChecks, { api, stage, classifier, outcome });
      this.safetyCheckChildren.set(key, count);
    }
    count.inc();
    let duration = this.safetyDurationChildren.get(classifier);
    if (!duration) {
      duration = histogramChild(this.safetyCheckDuration, { classifier });
      this.safetyDurationChildren.set(classifier, duration);
    }
    duration.observe(seconds);
  }

  /** Gantry's own time for one inference call on `api` (README, "Routing and health"). */
  overheadObserve(api: string, seconds: number): void {
    let child = this.overheadChildren.get(api);
    if (!child) {
      child = histogramChild(this.overhead, { route: api });
      this.overheadChildren.set(api, child);
    }
    child.observe(seconds);
  }

  /** An inference call on `api` began (+1) or ended (-1): the in-flight gauge, without label hashing. */
  inflightAdd(api: string, delta: number): void {
    let child = this.inflightChildren.get(api);
    if (!child) {
      child = gaugeChild(this.inflight, { route: api });
      this.inflightChildren.set(api, child);
    }
    child.add(delta);
  }

  /** One finished HTTP request. */
  requestDone(
    route: string,
    method: string,
    status: number,
    model: string,
    provider: string,
    seconds: number,
  ): void {
    const key = `${route}\u0000${method}\u0000${status}\u0000${model}\u0000${provider}`;
    let children = this.requestChildren.get(key);
    if (!children) {
      const s = String(status);
      children = {
        count: counterChild(this.requests, { route, method, status: s, model, provider }),
        duration: histogramChild(this.requestDuration, { route, status: s, model, provider }),
      };
      this.requestChildren.set(key, children);
    }
    children.count.inc();
    children.duration.observe(seconds);
  }

  /** A prediction reached a terminal status (off the request path: no child cache needed). */
  predictionDone(model: string, status: string, seconds: number): void {
    this.predictions.labels(model, status).inc();
    this.predictionDuration.labels(model, status).observe(seconds);
  }

  /** One finished inference call (admitted, whatever its outcome). */
  inferenceDone(api: string, model: string, provider: string, outcome: string, done: InferenceFacts): void {
    const key = `${api}\u0000${model}\u0000${provider}\u0000${outcome}`;
    let c = this.inferenceChildren.get(key);
    if (!c) {
      const genAi = {
        gen_ai_operation_name: api,
        gen_ai_request_model: model,
        gen_ai_provider_name: provider,
      };
      c = {
        duration: histogramChild(this.genAiDuration, {
          ...genAi,
          error_type: outcome === 'ok' ? '' : outcome,
        }),
        ttft: histogramChild(this.timeToFirstToken, genAi),
        usageIn: histogramChild(this.tokenUsage, { ...genAi, gen_ai_token_type: 'input' }),
        usageOut: histogramChild(this.tokenUsage, { ...genAi, gen_ai_token_type: 'output' }),
        tokensIn: counterChild(this.tokens, { model, provider, direction: 'input' }),
        tokensOut: counterChild(this.tokens, { model, provider, direction: 'output' }),
        tokensCached: counterChild(this.tokens, { model, provider, direction: 'cached_input' }),
        tokensCacheWrite: counterChild(this.tokens, { model, provider, direction: 'cache_write' }),
      };
      this.inferenceChildren.set(key, c);
    }
    c.duration.observe(done.seconds);
    if (done.ttftSeconds !== null) c.ttft.observe(done.ttftSeconds);
    if (done.inputTokens > 0) {
      c.usageIn.observe(done.inputTokens);
      c.tokensIn.inc(done.inputTokens);
    }
    if (done.outputTokens > 0) {
      c.usageOut.observe(done.outputTokens);
      c.tokensOut.inc(done.outputTokens);
    }
    if (done.cachedInputTokens > 0) c.tokensCached.inc(done.cachedInputTokens);
    if (done.cacheWriteInputTokens > 0) c.tokensCacheWrite.inc(done.cacheWriteInputTokens);
  }
}

interface RequestChildren {
  count: CountChild;
  duration: ObserveChild;
}

interface InferenceChildren {
  duration: ObserveChild;
  ttft: ObserveChild;
  usageIn: ObserveChild;
  usageOut: ObserveChild;
  tokensIn: CountChild;
  tokensOut: CountChild;
  tokensCached: CountChild;
  tokensCacheWrite: CountChild;
}

export interface InferenceFacts {
  seconds: number;
  ttftSeconds: number | null;
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  /** Input tokens written to the provider's prompt cache (part of inputTokens, as cached ones are). */
  cacheWriteInputTokens: number;
}
