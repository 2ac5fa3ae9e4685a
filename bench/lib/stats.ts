/** Percentiles over latency samples (milliseconds). */

export interface Summary {
  count: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** Nearest-rank percentile of sorted values; q in [0, 1]. */
export function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank] as number;
}

export function summarize(samples: ArrayLike<number>): Summary {
  const sorted = Float64Array.from(samples).sort();
  let sum = 0;
  for (let i = 0; i < sorted.length; i++) sum += sorted[i] as number;
  return {
    count: sorted.length,
    mean: sorted.length === 0 ? Number.NaN : sum / sorted.length,
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    p99: percentile(sorted, 0.99),
    max: sorted.length === 0 ? Number.NaN : (sorted[sorted.length - 1] as number),
  };
}

export function median(values: number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** Rounds for JSON output: 3 decimals (microseconds when the unit is ms). */
export function round3(n: number): number {
  return Number.isFinite(n) ? Math.round(n * 1000) / 1000 : n;
}

export function roundSummary(s: Summary): Summary {
  return {
    count: s.count,
    mean: round3(s.mean),
    p50: round3(s.p50),
    p90: round3(s.p90),
    p99: round3(s.p99),
    max: round3(s.max),
  };
}
