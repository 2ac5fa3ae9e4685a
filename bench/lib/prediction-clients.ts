/**
 * What the predictions phase (bench/predictions.ts) needs to watch a prediction from outside: a wall clock
 * with sub-millisecond resolution, a webhook receiver (node:http, in the bench process) that notes when
 * each delivery arrived, and an SSE reader that notes when the `done` event of a prediction's stream
 * arrived. Arrival times are epoch milliseconds, comparable with the prediction's `completed_at`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { Dispatcher } from 'undici';

/**
 * Epoch milliseconds with sub-millisecond resolution: Date.now() taken on a millisecond edge (so the
 * anchor is exact to a few microseconds, not to ±1 ms), carried on by the monotonic clock. Re-anchor
 * before each measured run so a slewing system clock cannot drift the two apart.
 */
export class EpochClock {
  private wall = Date.now();
  private mono = performance.now();

  anchor(): void {
    const start = Date.now();
    let now = Date.now();
    while (now === start) now = Date.now();
    this.mono = performance.now();
    this.wall = now;
  }

  now(): number {
    return this.wall + (performance.now() - this.mono);
  }
}

export interface Arrival {
  /** webhook_event_type of the delivery, e.g. prediction.succeeded. */
  event: string;
  id: string;
  status: string;
  /** completed_at of the prediction in the body (epoch ms), or NaN. */
  completedAt: number;
  /** created_at of the prediction in the body (epoch ms). */
  createdAt: number;
  /** When the whole request had arrived (epoch ms, EpochClock). */
  at: number;
}

/**
 * Records every webhook delivery: answers 200 at once, and hands the arrival to whoever waits for that
 * prediction and event (or keeps it for a waiter that comes later).
 */
export class WebhookReceiver {
  readonly url: string;
  /** Deliveries received, by event. */
  readonly counts = new Map<string, number>();
  /** Deliveries that could not be read (not JSON, no id). */
  malformed = 0;
  private readonly waiting = new Map<string, (arrival: Arrival) => void>();
  private readonly early = new Map<string, Arrival>();

  private constructor(
    private readonly server: Server,
    private readonly clock: EpochClock,
  ) {
    const { port } = server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${port}/hook`;
  }

  static async start(clock: EpochClock): Promise<WebhookReceiver> {
    let receiver: WebhookReceiver | undefined;
    const server = createServer((req, res) => receiver?.onRequest(req, res));
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    receiver = new WebhookReceiver(server, clock);
    return receiver;
  }

  /** The delivery of `event` for prediction `id`, or undefined after `timeoutMs`. */
  waitFor(id: string, event: string, timeoutMs: number): Promise<Arrival | undefined> {
    const key = `${id} ${event}`;
    const seen = this.early.get(key);
    if (seen) {
      this.early.delete(key);
      return Promise.resolve(seen);
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(key);
        resolve(undefined);
      }, timeoutMs);
      this.waiting.set(key, (arrival) => {
        clearTimeout(timer);
        resolve(arrival);
      });
    });
  }

  /** Forgets deliveries nobody waited for (e.g. the started events of a run). */
  forgetUnclaimed(): void {
    this.early.clear();
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const at = this.clock.now();
      res.writeHead(200, { 'content-length': '0' }).end();
      let body: {
        id?: unknown;
        status?: unknown;
        webhook_event_type?: unknown;
        completed_at?: unknown;
        created_at?: unknown;
      };
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        this.malformed++;
        return;
      }
      if (typeof body.id !== 'string' || typeof body.webhook_event_type !== 'string') {
        this.malformed++;
        return;
      }
      const event = body.webhook_event_type;
      this.counts.set(event, (this.counts.get(event) ?? 0) + 1);
      const arrival: Arrival = {
        event,
        id: body.id,
        status: String(body.status),
        completedAt: typeof body.completed_at === 'string' ? Date.parse(body.completed_at) : Number.NaN,
        createdAt: typeof body.created_at === 'string' ? Date.parse(body.created_at) : Number.NaN,
        at,
      };
      const key = `${body.id} ${event}`;
      const waiter = this.waiting.get(key);
      if (waiter) {
        this.waiting.delete(key);
        waiter(arrival);
      } else this.early.set(key, arrival);
    });
  }
}

export interface StreamWatch {
  /** When the response headers arrived (epoch ms): Gantry subscribes to the prediction right after. */
  headersAt: number;
  /** When the chunk holding the `done` event arrived (epoch ms); NaN if the stream ended without one. */
  doneAt: number;
  /** The `done` event's data, e.g. {"status":"succeeded"}. */
  doneData: string;
  /** Event names in order of arrival. */
  events: string[];
}

const DONE_EVENT = /(?:^|\n)event: done\n((?:data: [^\n]*\n)*)\n/;

/** GET /v1/predictions/{id}/stream and read it to its end, noting when `done` arrived. */
export async function watchStream(
  dispatcher: Dispatcher,
  path: string,
  headers: Record<string, string>,
  clock: EpochClock,
  timeoutMs: number,
): Promise<StreamWatch> {
  const signal = AbortSignal.timeout(timeoutMs);
  const res = await dispatcher.request({
    method: 'GET',
    path,
    headers: { ...headers, accept: 'text/event-stream' },
    signal,
  });
  const headersAt = clock.now();
  if (res.statusCode !== 200) {
    const text = await res.body.text().catch(() => '');
    throw new Error(`stream: HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
  }
  let text = '';
  let doneAt = Number.NaN;
  let doneData = '';
  for await (const chunk of res.body) {
    text += (chunk as Buffer).toString('utf8');
    if (Number.isNaN(doneAt)) {
      const m = DONE_EVENT.exec(text);
      if (m) {
        doneAt = clock.now();
        doneData = (m[1] ?? '')
          .split('\n')
          .filter((l) => l.startsWith('data: '))
          .map((l) => l.slice(6))
          .join('\n');
      }
    }
  }
  const events = [...text.matchAll(/(?:^|\n)event: ([^\n]+)\n/g)].map((m) => m[1] as string);
  return { headersAt, doneAt, doneData, events };
}
