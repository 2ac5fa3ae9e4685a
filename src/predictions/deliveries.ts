import type { Agent } from 'undici';
import { retryDelayMs, shouldGiveUp } from '../backoff.js';
import { deliverOnce } from '../webhooks/attempt.js';
import { signWebhook } from '../webhooks/sign.js';
import { createGuardedAgent } from '../webhooks/ssrf.js';
import type { PredictionDeps } from './context.js';
import { webhookSecretFor } from './lifecycle.js';
import { openSecrets } from './secrets.js';
import type { DeliveryAttemptLog, DeliveryRecord, JobInfo } from './types.js';

const MAX_LOG_LINES = 50;

/**
 * Delivers webhook events: at least once, retried with backoff and jitter for the configured span, and
 * in order per prediction (a delivery waits until every earlier event of its prediction is delivered or
 * given up). Each attempt is signed anew (fresh timestamp, same webhook-id) and logged on the delivery.
 */
export class WebhookDeliverer {
  private readonly agent: Agent;
  private readonly inFlight = new Set<string>();

  constructor(private readonly deps: PredictionDeps) {
    this.agent = createGuardedAgent({ allowPrivate: deps.config.predictions.webhooks.allowPrivate });
  }

  start(): void {
    this.deps.queue.process('webhook', (job) => this.deliver(job), { concurrency: 32 });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  async deliver(job: JobInfo): Promise<void> {
    // A sweep may queue a delivery this process is attempting right now.
    if (this.inFlight.has(job.id)) return;
    this.inFlight.add(job.id);
    try {
      await this.attempt(job);
    } finally {
      this.inFlight.delete(job.id);
    }
  }

  private async attempt(job: JobInfo): Promise<void> {
    const { deps } = this;
    const settings = deps.config.predictions.webhooks;
    const delivery = await deps.store.getDelivery(job.id);
    if (delivery?.state !== 'pending') return;

    const earlier = (await deps.store.deliveries(delivery.predictionId)).filter(
      (d) => d.seq < delivery.seq && d.state === 'pending',
    );
    // The earlier delivery queues this one when it settles (see settle), so nothing waits on a timer.
    if (earlier.length > 0) return;
    const prediction = await deps.store.get(delivery.predictionId);
    const target = prediction?.webhook;
    if (!prediction || !target) {
      await this.settle(delivery, 'failed', {
        at: Date.now(),
        outcome: 'gave_up',
        status: null,
        error: 'the prediction was deleted',
        ms: 0,
      });
      return;
    }

    const headers: Record<string, string> = {
      ...signWebhook({
        secret: webhookSecretFor(deps.secretKey, prediction.accountId),
        id: delivery.id,
        timestamp: Math.floor(Date.now() / 1000),
        body: delivery.body,
      }),
    };
    if (target.authHeader && target.authTokenSealed) {
      let token: unknown;
      try {
        token = openSecrets({}, target.authTokenSealed, deps.secretKey).token;
      } catch {
        // Sealed with another instance key: no retry can open it; give up rather than block the queue.
        await this.settle(delivery, 'failed', {
          at: Date.now(),
          outcome: 'gave_up',
          status: null,
          error: 'the webhook auth token cannot be opened with this instance key',
          ms: 0,
        });
        return;
      }
      headers[target.authHeader] = String(token);
    }
    const result = await deliverOnce({
      url: target.url,
      body: delivery.body,
      headers,
      timeoutMs: settings.timeoutMs,
      dispatcher: this.agent,
    });
    const attempts = delivery.attempts + 1;
    const line: DeliveryAttemptLog = {
      at: Date.now(),
      outcome: result.outcome,
      status: result.status ?? null,
      error: 'error' in result ? (result.error ?? null) : null,
      ms: result.ms,
    };
    deps.metrics.webhookAttempts.labels(delivery.event, result.outcome).inc();

    if (result.outcome === 'delivered') {
      deps.metrics.webhookLatency.labels(delivery.event).observe((Date.now() - delivery.createdAt) / 1000);
      await this.settle({ ...delivery, attempts }, 'delivered', line);
      return;
    }
    if (result.outcome === 'rejected' || shouldGiveUp(delivery.createdAt, Date.now(), settings.retrySpanMs)) {
      const final = result.outcome === 'rejected' ? line : { ...line, outcome: 'gave_up' as const };
      deps.metrics.webhooksFailed.labels(delivery.event).inc();
      deps.log.warn(
        {
          prediction: delivery.predictionId,
          event: delivery.event,
          attempts,
          status: line.status,
          error: line.error,
        },
        'webhook delivery given up',
      );
      await this.settle({ ...delivery, attempts }, 'failed', final);
      return;
    }
    const delayMs = retryDelayMs(
      attempts,
      { baseMs: settings.backoffBaseMs, maxMs: settings.backoffMaxMs },
      'retryAfterMs' in result ? result.retryAfterMs : undefined,
    );
    await deps.store.updateDelivery(delivery.id, {
      attempts,
      nextAttemptAt: Date.now() + delayMs,
      log: appendLog(delivery.log, line),
    });
    await deps.queue.add('webhook', delivery.id, { delayMs });
  }

  private async settle(delivery: DeliveryRecord, state: 'delivered' | 'failed', line: DeliveryAttemptLog) {
    await this.deps.store.updateDelivery(delivery.id, {
      state,
      attempts: delivery.attempts,
      nextAttemptAt: null,
      log: appendLog(delivery.log, line),
    });
    // The prediction's next event may have been waiting for this one.
    const next = (await this.deps.store.deliveries(delivery.predictionId)).find(
      (d) => d.seq > delivery.seq && d.state === 'pending',
    );
    if (next) await this.deps.queue.add('webhook', next.id);
  }
}

function appendLog(log: DeliveryAttemptLog[], line: DeliveryAttemptLog): DeliveryAttemptLog[] {
  const next = [...log, line];
  return next.length > MAX_LOG_LINES ? next.slice(next.length - MAX_LOG_LINES) : next;
}
