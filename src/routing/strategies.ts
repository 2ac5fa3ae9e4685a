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
 * - latency: power of two choices: two drawn at random, the lower moving average of time to first byte
 *   first (one never measured counts as fastest, so a new deployment gets traffic).
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
      const open: Deployment[] = [];
      for (const d of deployments) if (d.breaker.selectable(now)) open.push(d);
      if (open.length < 2) return open[0];
      const i = Math.floor(random() * open.length);
      let j = Math.floor(random() * (open.length - 1));
      if (j >= i) j++;
      const a = open[i] as Deployment;
      const b = open[j] as Deployment;
      return ttfbOf(b) < ttfbOf(a) ? b : a;
    }
    default:
      return undefined;
  }
}

function ttfbOf(d: Deployment): number {
  return d.ewmaTtfbMs ?? 0;
}
