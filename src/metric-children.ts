import type { Counter, Gauge, Histogram } from 'prom-client';

/**
 * Label children for the request path that update prom-client's own stored value directly.
 *
 * A prom-client child (`metric.labels(...)`) re-validates and re-hashes its labels on every call, about
 * a microsecond each; a request makes about ten such calls. These children find the stored value of
 * their label set after the first call (which goes through prom-client and creates it), then add to
 * it in place as prom-client itself does (histogram.js `observe`, counter.js `setValue`), so the
 * exposition is unchanged. prom-client has kept that layout
 * (`hashMap` of `{labels, value}` or `{labels, bucketValues, sum, count}`) through many majors; if it is
 * ever not there, a child falls back to prom-client's own labels() child. test/metric-children.test.ts
 * compares both ways.
 */

type Labels = Record<string, string>;

export interface ObserveChild {
  observe(value: number): void;
}

export interface CountChild {
  inc(value?: number): void;
}

interface StoredValue {
  labels: Labels;
  value: number;
}

interface StoredHistogram {
  labels: Labels;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}

interface Internals<T> {
  hashMap?: Record<string, T>;
  upperBounds?: number[];
}

/** The stored value of exactly this label set, or undefined when prom-client's layout is not the known one. */
function stored<T extends { labels: Labels }>(metric: object, labels: Labels): T | undefined {
  const hashMap = (metric as Internals<T>).hashMap;
  if (hashMap === null || typeof hashMap !== 'object') return undefined;
  const names = Object.keys(labels);
  for (const entry of Object.values(hashMap)) {
    const own = entry?.labels;
    if (!own || Object.keys(own).length !== names.length) continue;
    if (names.every((name) => own[name] === labels[name])) return entry;
  }
  return undefined;
}

export function histogramChild<T extends string>(metric: Histogram<T>, labels: Labels): ObserveChild {
  const fallback = metric.labels(labels as Partial<Record<T, string>>);
  const bounds = (metric as unknown as Internals<StoredHistogram>).upperBounds;
  let entry: StoredHistogram | undefined;
  let known = Array.isArray(bounds);
  // prom-client's bucketValues are keyed by String(bound): with the strings made once, no number is
  // turned into a property key on every observation.
  const keys = known ? (bounds as number[]).map(String) : [];
  return {
    observe(value: number): void {
      if (entry === undefined || !Number.isFinite(value)) {
        // The first observation (and any prom-client would refuse) goes through prom-client, which
        // creates the stored value; later ones add to it.
        fallback.observe(value);
        if (known) {
          entry = stored<StoredHistogram>(metric, labels);
          known =
            entry !== undefined && typeof entry.bucketValues === 'object' && typeof entry.sum === 'number';
          if (!known) entry = undefined;
        }
        return;
      }
      entry.sum += value;
      entry.count += 1;
      const upper = bounds as number[];
      for (let i = 0; i < upper.length; i++) {
        if (value <= (upper[i] as number)) {
          const counts = entry.bucketValues as unknown as Record<string, number>;
          const key = keys[i] as string;
          counts[key] = (counts[key] ?? 0) + 1;
          return;
        }
      }
    },
  };
}

/**
 * Adds to a `{labels, value}` entry (counters, gauges): `first` goes through prom-client, which makes the
 * entry, as does any value `accepts` refuses; later values add to the entry in place.
 */
function valueAdder(
  metric: object,
  labels: Labels,
  first: (delta: number) => void,
  accepts: (delta: number) => boolean,
): (delta: number) => void {
  let entry: StoredValue | undefined;
  let known = true;
  return (delta) => {
    if (entry === undefined || !accepts(delta)) {
      first(delta);
      if (known) {
        entry = stored<StoredValue>(metric, labels);
        known = entry !== undefined && typeof entry.value === 'number';
        if (!known) entry = undefined;
      }
      return;
    }
    entry.value += delta;
  };
}

export function counterChild<T extends string>(metric: Counter<T>, labels: Labels): CountChild {
  const fallback = metric.labels(labels as Partial<Record<T, string>>);
  const add = valueAdder(metric, labels, (value) => fallback.inc(value), isCount);
  return {
    inc(value = 1): void {
      add(value);
    },
  };
}

function isCount(value: number): boolean {
  return value >= 0 && Number.isFinite(value);
}

export interface GaugeChild {
  /** Adds `delta` (negative to take away), as prom-client's inc/dec. */
  add(delta: number): void;
}

/**
 * As the other children: a gauge updated only through its children and prom-client's inc/dec (set(),
 * reset() and remove() replace the stored value, which a child would then no longer see).
 */
export function gaugeChild<T extends string>(metric: Gauge<T>, labels: Labels): GaugeChild {
  const fallback = metric.labels(labels as Partial<Record<T, string>>);
  const first = (delta: number) => (delta < 0 ? fallback.dec(-delta) : fallback.inc(delta));
  return { add: valueAdder(metric, labels, first, Number.isFinite) };
}
