/** UTC days written YYYY-MM-DD, as the usage queries take and answer them. */

const DAY_MS = 86_400_000;
const DAY_FORMAT = /^(\d{4})-(\d{2})-(\d{2})$/;
/**
 * The years a query may name. Days are compared and stepped as written, so every day a query can reach
 * (a range, its default start 29 days back, the day after its end) must keep a 4-digit year: past 9999
 * ISO strings turn into "+010000-01-01", which sorts before "9999-12-31".
 */
const FIRST_YEAR = 1900;
const LAST_YEAR = 9998;

/**
 * The longest range a usage query spans, in days (both ends included): the days the distributed mode
 * keeps (redis-sink.ts, DEFAULT_DAY_TTL_SECONDS).
 */
export const MAX_USAGE_DAYS = 400;

/** Whether `value` is a real calendar day written YYYY-MM-DD (2026-02-30 is not) in the years queries take. */
export function isDay(value: string): boolean {
  const match = DAY_FORMAT.exec(value);
  if (!match) return false;
  const year = Number(match[1]);
  if (year < FIRST_YEAR || year > LAST_YEAR) return false;
  const date = new Date(Date.UTC(year, Number(match[2]) - 1, Number(match[3])));
  return date.toISOString().slice(0, 10) === value;
}

/** The UTC day of an epoch-ms time, YYYY-MM-DD. */
export function dayOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** Epoch ms of the start of `day` (YYYY-MM-DD). */
export function dayStart(day: string): number {
  return Date.parse(`${day}T00:00:00.000Z`);
}

/** `day` moved by `days` (negative: back). */
export function addDays(day: string, days: number): string {
  return dayOf(dayStart(day) + days * DAY_MS);
}

/** How many days `from` to `to` spans, both included (0 or less when from is after to). */
export function daySpan(from: string, to: string): number {
  return Math.round((dayStart(to) - dayStart(from)) / DAY_MS) + 1;
}

/**
 * The days from `from` to `to`, both included; none when from > to. Stepped on epoch ms, never on the
 * strings, and never more than MAX_USAGE_DAYS: a longer or unreadable range is a caller's bug.
 */
export function daysBetween(from: string, to: string): string[] {
  const start = dayStart(from);
  const end = dayStart(to);
  if (!Number.isFinite(start) || !Number.isFinite(end)) throw new RangeError(`not days: ${from}, ${to}`);
  const days: string[] = [];
  for (let ms = start; ms <= end; ms += DAY_MS) {
    if (days.length >= MAX_USAGE_DAYS) {
      throw new RangeError(`${from} to ${to} spans more than ${MAX_USAGE_DAYS} days`);
    }
    days.push(dayOf(ms));
  }
  return days;
}
