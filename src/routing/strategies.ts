import type { RoutingStrategy } from '../config/types.js';
import type { Deployment } from './health.js';

/** A number in [0, 1), Math.random unless a test gives its own. */
export type Random = () => number;

/**
 * The order in which a call tries a model's deployments (README, "Routing and health"). Each strategy
 * picks the first among the deployments whose circuit would let a call through; the others follow in
 * their configured order as fallbacks (open ones are skipped by dispatch without a connection attempt).
 *
 * - priority: the configured order.
 * - weighted: the first drawn at random by weight.
 * - least_inflight: the fewest calls in flight first (ties: configured order).
 * - latency: power of two choices: two drawn at random, the lower cost first. The cost is the moving
 *   average of time to first byte times (calls in flight + 1), so a fast deployment that is already busy
 *   does not take everything; the average fades with the time since its last sample (halved every
 *   LATENCY_HALF_LIFE_MS), so a deployment once measured slow is tried again and re-measured rather than
 *   starved. One never measured counts as fastest, so a new deployment gets traffic.
 */
export function orderDeployments(
  strategy: RoutingStrategy,
  deployments: readonly Deployment[],
  now: number,
  random: Random = Math.random,
): readonly Deployment[] {
  if (strategy === 'priority' || deployments.length < 2) return deployments;
  const first = pickFirst(strategy, deployments, now, random);
  if (first === undefined || first === deployments[0]) return deployments;
  const ordered: Deployment[] = [first];
  for (const d of deployments) if (d !== first) ordered.push(d);
  return ordered;
}

function pickFirst(
  strategy: RoutingStrategy,
  deployments: readonly Deployment[],
  now: number,
  random: Random,
): Deployment | undefined {
  switch (strategy) {
    case 'weighted': {
      let total = 0;
      for (const d of deployments) if (d.breaker.selectable(now)) total += d.weight;
      if (total <= 0) return undefined;
      let draw = random() * total;
      for (const d of deployments) {
        if (!d.breaker.selectable(now) || d.weight <= 0) continue;
        draw -= d.weight;
        if (draw < 0) return d;
      }
      return undefined;
    }
    case 'least_inflight': {
      let best: Deployment | undefined;
      for (const d of deployments) {
        if (d.breaker.selectable(now) && (best === undefined || d.inflight < best.inflight)) best = d;
      }
      return best;
    }
    case 'latency': {
      // Two distinct draws among the selectable ones, without building a list of them.
      let selectable = 0;
      for (const d of deployments) if (d.breaker.selectable(now)) selectable++;
      if (selectable === 0) return undefined;
      const i = Math.floor(random() * selectable);
      if (selectable === 1) return nthSelectable(deployments, 0, now);
      let j = Math.floor(random() * (selectable - 1));
      if (j >= i) j++;
      const a = nthSelectable(deployments, i, now) as Deployment;
      const b = nthSelectable(deployments, j, now) as Deployment;
      return latencyCost(b, now) < latencyCost(a, now) ? b : a;
    }
    default:
      return undefined;
  }
}

/** How fast a stale latency sample fades (see the latency strategy above). */
export const LATENCY_HALF_LIFE_MS = 30_000;

function latencyCost(d: Deployment, now: number): number {
  if (d.ewmaTtfbMs === undefined) return 0;
  const faded = d.ewmaTtfbMs * 0.5 ** (Math.max(0, now - d.ttfbAt) / LATENCY_HALF_LIFE_MS);
  return faded * (d.inflight + 1);
}

function nthSelectable(deployments: readonly Deployment[], n: number, now: number): Deployment | undefined {
  let seen = 0;
  for (const d of deployments) {
    if (!d.breaker.selectable(now)) continue;
    if (seen === n) return d;
    seen++;
  }
  return undefined;
}
