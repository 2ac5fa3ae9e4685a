/**
 * The harness the fake upstreams share: a real node:http server on 127.0.0.1 that records every
 * request, answers each with a scripted behaviour (queued one-shots first, then a default) and knows
 * how each exchange ended. A fake built on it only speaks its wire format (`handle`); how a client
 * leaving, a stall or a cut look on the wire is decided here once, so the fakes cannot drift apart.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export type JsonObject = Record<string, unknown>;

/** How an exchange ended: the response was sent in full, the client left, or the fake cut it. */
export type Outcome = 'finished' | 'aborted' | 'cut';

export interface RecordedExchange<B> {
  method: string;
  /** Path with query string, e.g. `/v1/chat/completions`. */
  path: string;
  headers: IncomingHttpHeaders;
  rawBody: Buffer;
  /** The body parsed as JSON, or undefined when it is empty or not a JSON object. */
  body: JsonObject | undefined;
  /** The behaviour this request was answered with. */
  behavior: B;
  /** True once the client closed the connection before the fake finished its response. */
  aborted: boolean;
  /** Resolves when the exchange is over: sent in full, the client left, or the fake cut it. */
  settled: Promise<Outcome>;
}

/** One request as the fake's `handle` sees it; the body has already been read. */
export interface Exchange<B> {
  req: IncomingMessage;
  res: ServerResponse;
  rawBody: Buffer;
  body: JsonObject | undefined;
  behavior: B;
  /** The request's number (from 1), for ids in the answer. */
  id: number;
  /** Aborted when the response is over for any reason (finished, client gone, cut). */
  gone: AbortSignal;
  /** Destroys the socket now, on purpose: recorded as 'cut', not as the client leaving. */
  cut(): void;
}

/** What a test drives a fake with, whatever protocol it speaks. */
export interface FakeServerControls<B> {
  requests: RecordedExchange<B>[];
  /** Sets the behaviour for every request not served from the queue. */
  setBehavior(behavior: B): void;
  /** Queues one-shot behaviours, used by the next requests in order (any route). */
  enqueue(...behaviors: B[]): void;
  /** Waits until `count` requests have been received. */
  waitForRequests(count: number, timeoutMs?: number): Promise<RecordedExchange<B>[]>;
  /** Forgets recorded requests, queue and behaviour. */
  reset(): void;
  close(): Promise<void>;
}

export interface RecordingServer<B> extends FakeServerControls<B> {
  /** `http://127.0.0.1:PORT` */
  origin: string;
  port: number;
}

export interface RecordingServerOptions<B> {
  /** Names the fake in waitForRequests' timeout error, e.g. `fake upstream`. */
  name: string;
  /** The behaviour used when the queue is empty, and the one reset() goes back to. */
  behavior: B;
  /** The JSON body of the 500 answered when `handle` throws, in the fake's own error format. */
  errorBody(message: string): JsonObject;
  /** reset() also numbers requests from 1 again, so ids after a reset do not depend on earlier tests. */
  resetIds?: boolean;
}

export async function startRecordingServer<B>(
  handle: (exchange: Exchange<B>) => Promise<void> | void,
  options: RecordingServerOptions<B>,
): Promise<RecordingServer<B>> {
  let defaultBehavior = options.behavior;
  const queue: B[] = [];
  const requests: RecordedExchange<B>[] = [];
  const waiters = new Set<() => void>();
  const sockets = new Set<Socket>();
  let counter = 0;

  const server = createServer((req, res) => {
    serve(req, res).catch((err: unknown) => {
      if (!res.headersSent && !res.destroyed) {
        sendJson(res, 500, options.errorBody(`fake upstream bug: ${String(err)}`));
      } else {
        res.destroy();
      }
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const rawBody = await readBody(req);
    const behavior = queue.shift() ?? defaultBehavior;
    const id = ++counter;
    const body = parseObject(rawBody);

    let outcome: Outcome | undefined;
    let settle: (value: Outcome) => void = () => undefined;
    const settled = new Promise<Outcome>((resolve) => {
      settle = resolve;
    });
    const record: RecordedExchange<B> = {
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: req.headers,
      rawBody,
      body,
      behavior,
      aborted: false,
      settled,
    };
    requests.push(record);
    for (const wake of waiters) wake();

    const gone = new AbortController();
    res.on('close', () => {
      if (outcome === undefined) {
        outcome = res.writableFinished ? 'finished' : 'aborted';
        if (outcome === 'aborted') record.aborted = true;
      }
      gone.abort();
      settle(outcome);
    });
    if (req.socket.destroyed) {
      // The client left before its request was even read to the end: `close` has already fired.
      outcome = 'aborted';
      record.aborted = true;
      gone.abort();
      settle(outcome);
      return;
    }
    const cut = (): void => {
      outcome = 'cut';
      res.destroy();
    };
    await handle({ req, res, rawBody, body, behavior, id, gone: gone.signal, cut });
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;

  return {
    origin: `http://127.0.0.1:${port}`,
    port,
    requests,
    setBehavior(behavior) {
      defaultBehavior = behavior;
    },
    enqueue(...behaviors) {
      queue.push(...behaviors);
    },
    waitForRequests(count, timeoutMs = 2000) {
      if (requests.length >= count) return Promise.resolve(requests.slice());
      return new Promise((resolve, reject) => {
        const wake = (): void => {
          if (requests.length < count) return;
          clearTimeout(timer);
          waiters.delete(wake);
          resolve(requests.slice());
        };
        const timer = setTimeout(() => {
          waiters.delete(wake);
          reject(new Error(`${options.name} got ${requests.length} requests, expected ${count}`));
        }, timeoutMs);
        waiters.add(wake);
      });
    },
    reset() {
      if (options.resetIds) counter = 0;
      requests.length = 0;
      queue.length = 0;
      defaultBehavior = options.behavior;
    },
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      server.closeAllConnections();
      await closed;
    },
  };
}

/** When a paced response misbehaves; each count is the number of pieces sent before it does. */
export interface Pacing {
  /** Wait this long before each piece. */
  delayMs?: number;
  /** Destroy the socket (a cut). */
  closeAfter?: number;
  /** Go silent until the client leaves. */
  stallAfter?: number;
  /** End the response properly, leaving the rest unsent. */
  endAfter?: number;
}

/** Writes `pieces` one by one with `pacing`, then ends the response unless it stalled or was cut. */
export async function writePaced(ex: Exchange<unknown>, pieces: string[], pacing: Pacing): Promise<void> {
  for (let i = 0; i < pieces.length; i++) {
    if (pacing.closeAfter !== undefined && i >= pacing.closeAfter) return ex.cut();
    if (pacing.stallAfter !== undefined && i >= pacing.stallAfter) return waitUntil(ex.gone);
    if (pacing.endAfter !== undefined && i >= pacing.endAfter) break;
    if (pacing.delayMs) await sleep(pacing.delayMs, ex.gone);
    if (ex.gone.aborted) return;
    await write(ex.res, pieces[i] ?? '', ex.gone);
  }
  ex.res.end();
}

/** Sends a whole JSON answer; a string `value` is sent as it is, so a fake can send broken JSON. */
export function sendJson(
  res: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
  contentType = 'application/json',
): void {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  res.writeHead(status, {
    ...headers,
    'content-type': contentType,
    'content-length': String(Buffer.byteLength(text)),
  });
  res.end(text);
}

/** Writes and waits until the data is handed to the socket, so a following cut cannot discard it. */
export function write(res: ServerResponse, data: string, gone: AbortSignal): Promise<void> {
  if (gone.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    // A write pending when the socket dies may never call back: the abort resolves it instead.
    const done = (): void => {
      gone.removeEventListener('abort', done);
      resolve();
    };
    gone.addEventListener('abort', done);
    res.write(data, done);
  });
}

/** Resolves after `ms`, or at once when `signal` aborts: a fake must not outlive its client. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done);
  });
}

export function waitUntil(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

export function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function parseObject(raw: Buffer): JsonObject | undefined {
  try {
    const parsed: unknown = JSON.parse(raw.toString('utf8'));
    return isObject(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}
