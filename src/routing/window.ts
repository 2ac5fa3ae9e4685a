/**
 * A sliding window of call outcomes, in ten buckets: calls, failures and the sum of times to first byte.
 * Adding is O(1) with no allocation; reading sums the buckets still inside the window.
 */
const BUCKETS = 10;

export interface WindowCounts {
  calls: number;
  failures: number;
  /** Mean time to first byte of the calls that reported one, or undefined when none did. */
  meanTtfbMs: number | undefined;
}

export class OutcomeWindow {
  private readonly bucketMs: number;
  /** Which bucket period each slot holds; a slot from an older period counts as empty. */
  private readonly epochs = new Float64Array(BUCKETS).fill(-1);
  private readonly calls = new Uint32Array(BUCKETS);
  private readonly failures = new Uint32Array(BUCKETS);
  private readonly ttfbSums = new Float64Array(BUCKETS);
  private readonly ttfbCounts = new Uint32Array(BUCKETS);

  constructor(windowMs: number) {
    this.bucketMs = Math.max(1, windowMs / BUCKETS);
  }

  add(now: number, failed: boolean, ttfbMs: number | undefined): void {
    const epoch = Math.floor(now / this.bucketMs);
    const slot = epoch % BUCKETS;
    if (this.epochs[slot] !== epoch) {
      this.epochs[slot] = epoch;
      this.calls[slot] = 0;
      this.failures[slot] = 0;
      this.ttfbSums[slot] = 0;
      this.ttfbCounts[slot] = 0;
    }
    this.calls[slot] = (this.calls[slot] as number) + 1;
    if (failed) this.failures[slot] = (this.failures[slot] as number) + 1;
    if (ttfbMs !== undefined) {
      this.ttfbSums[slot] = (this.ttfbSums[slot] as number) + ttfbMs;
      this.ttfbCounts[slot] = (this.ttfbCounts[slot] as number) + 1;
    }
  }

  counts(now: number): WindowCounts {
    const current = Math.floor(now / this.bucketMs);
    let calls = 0;
    let failures = 0;
    let ttfbSum = 0;
    let ttfbCount = 0;
    for (let slot = 0; slot < BUCKETS; slot++) {
      const epoch = this.epochs[slot] as number;
      if (epoch < 0 || current - epoch >= BUCKETS) continue;
      calls += this.calls[slot] as number;
      failures += this.failures[slot] as number;
      ttfbSum += this.ttfbSums[slot] as number;
      ttfbCount += this.ttfbCounts[slot] as number;
    }
    return { calls, failures, meanTtfbMs: ttfbCount === 0 ? undefined : ttfbSum / ttfbCount };
  }

  /** Forgets everything (a circuit that closed again starts from a clean slate). */
  clear(): void {
    this.epochs.fill(-1);
  }
}
