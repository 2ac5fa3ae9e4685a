import type { Principal } from '../auth/authenticate.js';
import type { ModelEntry } from '../config/types.js';
import { admitOrRefuse, bucketsFor, quotaHeaders } from '../inference/quota.js';
import type { Lease } from '../limits/index.js';
import { computeCost, toCredits } from '../metering/pricing.js';
import { assertCredits } from '../usage/credit-check.js';
import type { PredictionDeps } from './context.js';
import type { JsonObject } from './types.js';

export interface PredictionAdmission {
  /** Holds the account×model concurrency slot until the prediction ends (released in lifecycle.finish). */
  lease: Lease;
  headers: Record<string, string>;
}

/**
 * Credits (402) and rate limits (429) for a new prediction, as for inference calls: the account and
 * account×model buckets count one request, and a concurrency slot is held from creation until the
 * prediction reaches a terminal status, so `concurrency` caps a model's running generations.
 */
export async function admitPrediction(
  deps: PredictionDeps,
  principal: Principal,
  entry: ModelEntry,
  input: JsonObject,
): Promise<PredictionAdmission> {
  const { account } = principal;
  const services = deps.services;
  if (entry.billable) {
    const outputs = Number(input.num_outputs ?? input.num_images ?? input.number_of_images ?? 1);
    const estimate = computeCost(
      entry.pricing,
      {
        predictions: 1,
        images: entry.type === 'image' && Number.isFinite(outputs) ? outputs : 0,
        params: input,
      },
      { billable: true, modelType: entry.type },
    );
    const needed = toCredits(estimate.cost, estimate.currency, deps.config.credits.perCurrency);
    await assertCredits(services, deps.config, account.id, needed, 'prediction');
  }
  const admission = await admitOrRefuse(services, {
    accountId: account.id,
    buckets: bucketsFor(deps.config, account.tier, entry),
    inputTokens: 0,
    outputTokens: 0,
  });
  return { lease: admission.lease, headers: quotaHeaders(admission.quota) };
}

/** Gives the concurrency slot back; a limiter that is down lets the lease expire by itself. */
export async function releasePrediction(deps: PredictionDeps, lease: Lease | null): Promise<void> {
  if (!lease) return;
  await deps.services.limiter.release(lease, { inputTokens: 0, outputTokens: 0 }).catch(() => undefined);
}

/** Keeps a long prediction's slot while it runs (leases expire so a dead instance's slots come back). */
export async function extendPrediction(deps: PredictionDeps, lease: Lease | null): Promise<void> {
  if (!lease) return;
  await deps.services.limiter.extend(lease).catch(() => undefined);
}
