/**
 * The chaos run's API client, behaving as a careful real client would: requests go round robin to the
 * api instances (a load balancer), and a create that meets a connection error, a timeout or a 5xx is sent
 * again with the same Idempotency-Key (to the next instance), after Retry-After or a short backoff, until
 * it is accepted or its deadline passes. Every answer is tallied, so the report can count 500s.
 */
import { sleep, until } from '../test/helpers/wait.js';

/** Counts by label. */
export class Tally {
  readonly counts = new Map<string, number>();
  add(label: string, n = 1): void {
    this.counts.set(label, (this.counts.get(label) ?? 0) + n);
  }
  get total(): number {
    let sum = 0;
    for (const n of this.counts.values()) sum += n;
    return sum;
  }
  /** `label ×n, label ×n`, largest first. */
  describe(limit = 8): string {
    const sorted = [...this.counts].sort((a, b) => b[1] - a[1]);
    const shown = sorted.slice(0, limit).map(([label, n]) => `${n}× ${label}`);
    if (sorted.length > limit) shown.push(`${sorted.length - limit} more kinds`);
    return shown.join('; ');
  }
}

export interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
  text: string;
}

export interface PredictionView {
  id: string;
  status: string;
  error: string | null;
  logs: string | null;
  input: { prompt?: string };
}

/** What became of one create. */
export type CreateOutcome =
  | { kind: 'accepted'; id: string }
  | { kind: 'refused'; status: number; code: string }
  | { kind: 'gave up'; last: string };

/** The 5xx a client retries (as the OpenAI SDK does); 500 is retried too, and still counted. */
const RETRYABLE = new Set([500, 502, 503, 504]);

export class ChaosClient {
  /** HTTP 500 answers, by route. */
  readonly http500 = new Tally();
  /** Every answer by `METHOD route status`. */
  readonly answers = new Tally();
  /** Requests that got no answer, by error code (ECONNREFUSED, ECONNRESET, TimeoutError...). */
  readonly transport = new Tally();
  /** Creates sent again after a failed attempt. */
  retries = 0;
  /** Creates answered with Idempotent-Replayed: true. */
  replayed = 0;
  /** The longest a create attempt waited for its answer (any status), in ms. */
  slowestCreateMs = 0;
  private turn = 0;

  constructor(
    private readonly origins: readonly string[],
    private readonly key: string,
    private readonly timeoutMs: number,
  ) {}

  /** The next api instance, round robin. */
  nextOrigin(): string {
    return this.origins[this.turn++ % this.origins.length] as string;
  }

  /** One request; throws when no answer came (connection refused or reset, timeout). */
  async call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
    const origin = this.nextOrigin();
    const bare = path.split('?')[0] as string;
    const route = `${method} ${bare.replace(/\/v1\/predictions\/[^/]+/, '/v1/predictions/:id')}`;
    let res: Response;
    try {
      res = await fetch(origin + path, {
        method,
        headers: {
          'x-api-key': this.key,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...headers,
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (err) {
      this.transport.add(transportCode(err));
      throw err;
    }
    let text: string;
    try {
      text = await res.text();
    } catch (err) {
      this.transport.add(transportCode(err));
      throw err;
    }
    this.answers.add(`${route} ${res.status}`);
    if (res.status === 500) this.http500.add(route);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: res.status, headers: res.headers, body: parsed, text } satisfies Answer;
  }

  /** Creates a prediction, retrying as described above until `deadline` (epoch ms). */
  async create(body: unknown, idempotencyKey: string, deadline: number): Promise<CreateOutcome> {
    let last = '';
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0) this.retries++;
      let wait = Math.min(2_000, 100 * 2 ** attempt) * (0.5 + Math.random() / 2);
      try {
        const sentAt = Date.now();
        const res = await this.call('POST', '/v1/predictions', body, { 'idempotency-key': idempotencyKey });
        this.slowestCreateMs = Math.max(this.slowestCreateMs, Date.now() - sentAt);
        const prediction = res.body as PredictionView | undefined;
        if (res.status === 200 && prediction?.id) {
          if (res.headers.get('idempotent-replayed') === 'true') this.replayed++;
          return { kind: 'accepted', id: prediction.id };
        }
        const code = errorCode(res.body);
        last = `${res.status} ${code}`;
        if (!RETRYABLE.has(res.status)) return { kind: 'refused', status: res.status, code };
        const retryAfter = Number(res.headers.get('retry-after'));
        if (retryAfter > 0) wait = Math.min(5, retryAfter) * 1000;
      } catch (err) {
        last = transportCode(err);
      }
      if (Date.now() + wait > deadline) return { kind: 'gave up', last };
      await sleep(wait);
    }
  }

  async get(id: string): Promise<PredictionView | undefined> {
    try {
      const res = await this.call('GET', `/v1/predictions/${id}`);
      return res.status === 200 ? (res.body as PredictionView) : undefined;
    } catch {
      return undefined;
    }
  }

  /** Every prediction of the account, all pages (undefined when a page could not be read). */
  async listAll(): Promise<PredictionView[] | undefined> {
    const all: PredictionView[] = [];
    for (let page = 1; ; page++) {
      let res: Answer;
      try {
        res = await this.call('GET', `/v1/predictions?per_page=50&page=${page}`);
      } catch {
        return undefined;
      }
      if (res.status !== 200) return undefined;
      const { data, pagination } = res.body as {
        data: PredictionView[];
        pagination: { last_page: number };
      };
      all.push(...data);
      if (page >= pagination.last_page) return all;
    }
  }
}

function errorCode(body: unknown): string {
  const error = (body as { error?: { code?: unknown } } | undefined)?.error;
  return typeof error?.code === 'string' ? error.code : 'no error code';
}

function transportCode(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause as { code?: unknown } | undefined;
    if (typeof cause?.code === 'string') return cause.code;
    if (err.name === 'TimeoutError') return 'client timeout';
    return err.message;
  }
  return String(err);
}

/** Runs `fn` over `items` with at most `limit` calls in flight; results in item order. */
export async function mapPool<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>) {
  const results: R[] = new Array(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await fn(items[index] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return results;
}

export interface LoadOptions {
  count: number;
  /** Creates started per second. */
  rate: number;
  /** Creates in flight at most (retries included). */
  concurrency: number;
  /** How long one create may keep retrying. */
  createDeadlineMs: number;
  /** The body of create number `index`, sent with Idempotency-Key `key`. */
  body(index: number, key: string): unknown;
  /** Idempotency-Key of create number `index`. */
  key(index: number): string;
}

export interface LoadProgress {
  /** Creates started so far. */
  started: number;
  done: boolean;
}

export interface Sent {
  key: string;
  outcome: CreateOutcome;
}

/** Sends `count` creates at `rate` per second; `progress` is updated as it goes, for the kill schedule. */
export async function runLoad(client: ChaosClient, options: LoadOptions, progress: LoadProgress) {
  const sent: Sent[] = [];
  const inFlight = new Set<Promise<void>>();
  const begin = Date.now();
  for (let index = 0; index < options.count; index++) {
    const due = begin + (index * 1000) / options.rate;
    if (due > Date.now()) await sleep(due - Date.now());
    if (inFlight.size >= options.concurrency)
      await until(
        'a free create slot',
        () => inFlight.size < options.concurrency,
        options.createDeadlineMs * 2,
      );
    const key = options.key(index);
    const one = client
      .create(options.body(index, key), key, Date.now() + options.createDeadlineMs)
      .then((outcome) => {
        sent[index] = { key, outcome };
      })
      .finally(() => inFlight.delete(one));
    inFlight.add(one);
    progress.started = index + 1;
  }
  await Promise.all(inFlight);
  progress.done = true;
  return sent;
}
