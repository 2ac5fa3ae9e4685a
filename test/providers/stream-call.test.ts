/**
 * callForStream (providers/stream-call.ts) against real node:http upstreams through a real undici Pool:
 * chunk delivery, backpressure, stopping early (drop then cut), failures before and after the headers,
 * client cancellation and the total deadline.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Cancellation } from '../../providers/abort.js';
import { callForStream, type StreamAnswer, type StreamCallOptions } from '../../providers/stream-call.js';
import { closedPort } from '../helpers/ports.js';
import { sleep, until } from '../helpers/wait.js';

/** What the test's mapError makes: the original error and the two flags it was called with. */
class Mapped extends Error {
  constructor(
    readonly original: unknown,
    readonly timedOut: boolean,
    readonly midBody: boolean,
  ) {
    super(`mapped: ${(original as Error | undefined)?.message ?? String(original)}`);
    this.name = 'Mapped';
  }
}

/** Every call of mapError in the current test. */
let mapped: Mapped[] = [];
const mapError = (error: unknown, timedOut: boolean, midBody: boolean): Error => {
  const err = new Mapped(error, timedOut, midBody);
  mapped.push(err);
  return err;
};

/** One request as the upstream saw it. */
interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
  path: string;
  /** The response or its socket closed before the upstream ended the response (the client left or cut). */
  cut: boolean;
  /** The upstream ended the response and it was flushed. */
  finished: boolean;
}

interface Upstream {
  origin: string;
  server: Server;
  connections: number;
  exchanges: Exchange[];
}

type Handler = (req: IncomingMessage, res: ServerResponse, exchange: Exchange) => void;

const servers: Server[] = [];
const pools: Pool[] = [];

async function upstream(handler: Handler): Promise<Upstream> {
  const up: Upstream = { origin: '', server: createServer(), connections: 0, exchanges: [] };
  up.server.on('connection', () => {
    up.connections++;
  });
  up.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const exchange: Exchange = { req, res, path: req.url ?? '', cut: false, finished: false };
    up.exchanges.push(exchange);
    res.on('finish', () => {
      exchange.finished = true;
    });
    res.on('close', () => {
      if (!res.writableFinished) exchange.cut = true;
    });
    res.on('error', () => undefined);
    req.resume();
    req.on('end', () => handler(req, res, exchange));
  });
  servers.push(up.server);
  await new Promise<void>((resolve) => up.server.listen(0, '127.0.0.1', resolve));
  up.origin = `http://127.0.0.1:${(up.server.address() as AddressInfo).port}`;
  return up;
}

/** A pool of one connection, so that a second call reuses the first's connection if it was left usable. */
function pool(origin: string, options: Pool.Options = {}): Pool {
  const p = new Pool(origin, { connections: 1, ...options });
  pools.push(p);
  return p;
}

function call(p: Pool, options: Partial<StreamCallOptions> = {}): Promise<StreamAnswer> {
  return callForStream(p, {
    method: 'GET',
    path: '/',
    headers: {},
    body: undefined,
    signal: new Cancellation(),
    totalMs: 10_000,
    mapError,
    dropMs: 50,
    dropLimit: 64 * 1024,
    ...options,
  });
}

async function readAll(body: AsyncIterable<Buffer>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of body) parts.push(chunk);
  return Buffer.concat(parts);
}

/** The error `promise` rejected with: a Mapped one, with these flags. */
async function mappedFailure(
  promise: Promise<unknown>,
  flags: { timedOut: boolean; midBody: boolean },
): Promise<Mapped> {
  const error = await promise.then(
    () => new Error('expected a rejection, got a value'),
    (err: unknown) => err,
  );
  expect(error).toBeInstanceOf(Mapped);
  const m = error as Mapped;
  expect({ timedOut: m.timedOut, midBody: m.midBody }).toEqual(flags);
  return m;
}

/** Writes `chunk` every `everyMs` until the response closes (an upstream that never stops talking). */
function talkForever(res: ServerResponse, chunk: Buffer | string, everyMs: number): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write(chunk);
  const timer = setInterval(() => {
    if (!res.destroyed) res.write(chunk);
  }, everyMs);
  res.on('close', () => clearInterval(timer));
}

/**
 * After a first call that stopped early: a second call through the same one-connection pool is answered
 * on the same connection, and both answers finished (neither was cut), with nothing reported.
 */
async function expectConnectionReused(p: Pool, up: Upstream): Promise<void> {
  const second = await call(p, { path: '/second' });
  expect((await readAll(second.body)).toString()).toBe('second answer');
  expect(up.connections).toBe(1);
  expect(up.exchanges.map((e) => [e.path, e.finished, e.cut])).toEqual([
    ['/first', true, false],
    ['/second', true, false],
  ]);
  expect(mapped).toEqual([]);
}

beforeEach(() => {
  // Reset before, not after: a failed test's call may still report while afterEach tears it down.
  mapped = [];
});

/** How far an upstream writing a large body (bigBody) has got. */
interface Writer {
  written: number;
  /** The whole body was handed to the socket. */
  done: boolean;
  /** The last write was refused (the socket is full) and 'drain' has not come yet. */
  blocked: boolean;
  lastWriteAt: number;
  sent: ReturnType<typeof createHash>;
}

/** Answers with `total` bytes in 64 KiB writes, honouring write()'s return and 'drain'. */
function bigBody(total: number): { writer: Writer; handler: Handler } {
  const writer: Writer = {
    written: 0,
    done: false,
    blocked: false,
    lastWriteAt: 0,
    sent: createHash('sha256'),
  };
  const handler: Handler = (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(total) });
    let n = 0;
    const pump = (): void => {
      writer.blocked = false;
      while (writer.written < total) {
        const chunk = Buffer.alloc(64 * 1024, n++ % 251);
        writer.sent.update(chunk);
        writer.written += chunk.length;
        writer.lastWriteAt = Date.now();
        if (!res.write(chunk)) {
          writer.blocked = true;
          res.once('drain', pump);
          return;
        }
      }
      res.end(() => {
        writer.done = true;
      });
    };
    pump();
  };
  return { writer, handler };
}

afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.destroy()));
  await Promise.all(
    servers.splice(0).map(
      (s) =>
        new Promise<void>((resolve) => {
          s.closeAllConnections();
          s.close(() => resolve());
        }),
    ),
  );
});

describe('callForStream', () => {
  it('delivers the chunks complete and in order as they arrive, then reports done; the connection is reused', async () => {
    const parts = ['alpha-', 'beta-', 'gamma-', 'delta-', 'epsilon'];
    const up = await upstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain', 'x-upstream': 'yes' });
      let i = 0;
      // The end comes on its own too, while the consumer waits for more.
      const writeNext = (): void => {
        if (i < parts.length) res.write(parts[i++] as string);
        else res.end();
        if (!res.writableEnded) setTimeout(writeNext, 15);
      };
      writeNext();
    });
    const p = pool(up.origin);

    const answer = await call(p, { path: '/first' });
    expect(answer.status).toBe(200);
    expect(answer.headers['x-upstream']).toBe('yes');
    const received: Buffer[] = [];
    let finishedAtFirstChunk: boolean | undefined;
    for await (const chunk of answer.body) {
      expect(Buffer.isBuffer(chunk)).toBe(true);
      finishedAtFirstChunk ??= up.exchanges[0]?.finished;
      received.push(chunk);
    }
    expect(Buffer.concat(received).toString()).toBe(parts.join(''));
    // Streamed as it came: the first chunk was there while the upstream was still writing.
    expect(finishedAtFirstChunk).toBe(false);
    expect(received.length).toBeGreaterThan(1);
    expect(await answer.body.next()).toEqual({ done: true, value: undefined });

    const second = await call(p, { path: '/second' });
    expect((await readAll(second.body)).toString()).toBe(parts.join(''));
    expect(up.exchanges.map((e) => e.path)).toEqual(['/first', '/second']);
    expect(up.connections).toBe(1);
    expect(mapped).toEqual([]);
  });

  it('holds the upstream back while the consumer is behind, then delivers every byte', async () => {
    const total = 32 * 1024 * 1024;
    const { writer, handler } = bigBody(total);
    const up = await upstream(handler);
    const p = pool(up.origin);

    const answer = await call(p);
    const first = await answer.body.next();
    expect(first.done).toBe(false);
    const got = createHash('sha256');
    got.update(first.value as Buffer);
    let size = (first.value as Buffer).length;

    await sleep(500);
    expect(writer.done).toBe(false);
    expect(writer.written).toBeLessThan(total);

    for await (const chunk of answer.body) {
      got.update(chunk);
      size += chunk.length;
    }
    expect(size).toBe(total);
    expect(got.digest('hex')).toBe(writer.sent.digest('hex'));
    expect(writer.done).toBe(true);
    expect(mapped).toEqual([]);
  });

  describe("the pool's idle (body) timeout", () => {
    // undici runs it on a coarse timer: 300 ms fires after about a second.
    it('fails a silent upstream mid-body through mapError, not as the total deadline', async () => {
      const up = await upstream((_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: one\n\n'); // then silence
      });
      const p = pool(up.origin, { bodyTimeout: 300 });

      const answer = await call(p);
      expect((await answer.body.next()).value?.toString()).toBe('data: one\n\n');
      const m = await mappedFailure(answer.body.next(), { timedOut: false, midBody: true });
      expect((m.original as { code?: string }).code).toBe('UND_ERR_BODY_TIMEOUT');
    });

    it('does not fail an upstream held back for a consumer that is behind', async () => {
      const total = 8 * 1024 * 1024;
      const { writer, handler } = bigBody(total);
      const up = await upstream(handler);
      const p = pool(up.origin, { bodyTimeout: 300 });

      const answer = await call(p);
      let size = ((await answer.body.next()).value as Buffer).length;
      await until('the upstream held back', () => writer.blocked && Date.now() - writer.lastWriteAt > 100);
      // Well past the idle timeout (as the case above shows it fires), without reading.
      await sleep(2_000);
      expect(writer.done).toBe(false);
      for await (const chunk of answer.body) size += chunk.length;
      expect(size).toBe(total);
      expect(mapped).toEqual([]);
    });
  });

  it('resumes a held-back upstream to drop the rest when the consumer stops', async () => {
    const { writer, handler } = bigBody(8 * 1024 * 1024);
    const up = await upstream((req, res, exchange) => {
      if (req.url === '/second') res.end('second answer');
      else handler(req, res, exchange);
    });
    const p = pool(up.origin);

    // Limits the rest of this body fits in: only a paused upstream could keep it from being dropped.
    const answer = await call(p, { path: '/first', dropMs: 3_000, dropLimit: 64 * 1024 * 1024 });
    expect((await answer.body.next()).done).toBe(false);
    await until(
      'the upstream held back',
      () => writer.blocked && Date.now() - writer.lastWriteAt > 100,
      5_000,
      20,
    );
    await answer.body.return?.();

    await expectConnectionReused(p, up);
  });

  it('drops the end of an answer the consumer stopped reading, so the connection is reused', async () => {
    const up = await upstream((req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      if (req.url === '/second') {
        res.end('second answer');
        return;
      }
      res.write('data: the last event\n\n');
      setTimeout(() => res.end('data: [DONE]\n\n'), 20);
    });
    const p = pool(up.origin);

    const answer = await call(p, { path: '/first', dropMs: 1_000 });
    const first = await answer.body.next();
    expect(first.value?.toString()).toBe('data: the last event\n\n');
    expect(await answer.body.return?.()).toEqual({ done: true, value: undefined });
    expect(await answer.body.next()).toEqual({ done: true, value: undefined });

    await expectConnectionReused(p, up);
  });

  it('cuts the connection dropMs after the consumer stopped, when the upstream keeps talking', async () => {
    const up = await upstream((_req, res) => talkForever(res, Buffer.alloc(1024, 'x'), 10));
    const p = pool(up.origin);

    // A dropLimit the upstream does not reach for seconds: dropMs alone cuts it.
    const answer = await call(p, { dropMs: 50, dropLimit: 1024 * 1024 });
    expect((await answer.body.next()).done).toBe(false);
    const stoppedAt = Date.now();
    await answer.body.return?.();
    const exchange = up.exchanges[0] as Exchange;
    await until('the upstream sees its response cut', () => exchange.cut, 1_000, 2);
    const elapsed = Date.now() - stoppedAt;
    // Not at once: the rest was dropped for dropMs first.
    expect(elapsed).toBeGreaterThanOrEqual(40);

    // The cut is not reported to a consumer that stopped.
    await sleep(20);
    expect(mapped).toEqual([]);
    expect(await answer.body.next()).toEqual({ done: true, value: undefined });
  });

  it('ends a next() still waiting when the consumer stops from elsewhere, and the cut reports nothing', async () => {
    const up = await upstream((_req, res) => talkForever(res, Buffer.alloc(1024, 'x'), 200));
    const p = pool(up.origin);

    const answer = await call(p, { dropMs: 50, dropLimit: 1024 * 1024 });
    expect((await answer.body.next()).done).toBe(false);
    const waiting = answer.body.next();
    await answer.body.return?.();
    expect(await waiting).toEqual({ done: true, value: undefined });
    const exchange = up.exchanges[0] as Exchange;
    await until('the upstream sees its response cut', () => exchange.cut, 1_000, 2);
    expect(mapped).toEqual([]);
  });

  it('cuts the connection at once when the upstream sends more than dropLimit after the consumer stopped', async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const up = await upstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: first\n\n');
      // Then, once told, a burst larger than dropLimit, and the response left open.
      void released.then(() => res.write(Buffer.alloc(300 * 1024, 'y')));
    });
    const p = pool(up.origin);

    const answer = await call(p, { dropMs: 5_000, dropLimit: 64 * 1024 });
    expect((await answer.body.next()).value?.toString()).toBe('data: first\n\n');
    await answer.body.return?.();
    const releasedAt = Date.now();
    release();
    const exchange = up.exchanges[0] as Exchange;
    await until('the upstream sees its response cut', () => exchange.cut, 2_000, 5);
    expect(Date.now() - releasedAt).toBeLessThan(1_000);
    await sleep(20);
    expect(mapped).toEqual([]);
  });

  it('rejects the start through mapError when the upstream closes the connection before the headers', async () => {
    const up = await upstream((req) => req.socket.destroy());
    const p = pool(up.origin);

    const m = await mappedFailure(call(p), { timedOut: false, midBody: false });
    expect((m.original as { code?: string }).code).toBe('UND_ERR_SOCKET');
    expect(mapped).toHaveLength(1);
  });

  it('rejects the start through mapError when the connection is refused', async () => {
    const p = pool(`http://127.0.0.1:${await closedPort()}`);

    const m = await mappedFailure(call(p), { timedOut: false, midBody: false });
    expect((m.original as { code?: string }).code).toBe('ECONNREFUSED');
    expect(mapped).toHaveLength(1);
  });

  it('delivers what came, then rejects next() through mapError when the upstream breaks off mid-body', async () => {
    const up = await upstream((req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: before the break\n\n', () => setTimeout(() => req.socket.destroy(), 10));
    });
    const p = pool(up.origin);

    const answer = await call(p);
    expect(answer.status).toBe(200);
    await until('the upstream closed the connection', () => up.exchanges[0]?.cut === true);
    const first = await answer.body.next();
    expect(first.value?.toString()).toBe('data: before the break\n\n');
    const m = await mappedFailure(answer.body.next(), { timedOut: false, midBody: true });
    expect((m.original as { code?: string }).code).toBe('UND_ERR_SOCKET');
    // The failure stays: asked again, it is the same error, mapped once.
    expect(await answer.body.next().catch((err: unknown) => err)).toBe(m);
    expect(mapped).toHaveLength(1);
  });

  describe('client cancellation', () => {
    it('aborts the call while it waits for the headers', async () => {
      const up = await upstream(() => undefined); // never answers
      const p = pool(up.origin);
      const cancel = new Cancellation();

      const start = call(p, { signal: cancel });
      await until('the upstream has the request', () => up.exchanges.length === 1);
      cancel.abort();
      const m = await mappedFailure(start, { timedOut: false, midBody: false });
      expect((m.original as Error).name).toBe('AbortError');
      const exchange = up.exchanges[0] as Exchange;
      await until('the upstream sees the request closed', () => exchange.cut, 1_000);
      expect(mapped).toHaveLength(1);
    });

    it('aborts the call mid-body', async () => {
      const up = await upstream((_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: one\n\n'); // and then nothing, the response left open
      });
      const p = pool(up.origin);
      const cancel = new Cancellation();

      const answer = await call(p, { signal: cancel });
      expect((await answer.body.next()).value?.toString()).toBe('data: one\n\n');
      const pending = answer.body.next();
      cancel.abort();
      const m = await mappedFailure(pending, { timedOut: false, midBody: true });
      expect((m.original as Error).name).toBe('AbortError');
      const exchange = up.exchanges[0] as Exchange;
      await until('the upstream sees the request closed', () => exchange.cut, 1_000);
      expect(mapped).toHaveLength(1);
    });

    it('never sends the request when the cancellation came before the call', async () => {
      const up = await upstream((req, res) => res.end(`answer to ${req.url}`));
      const p = pool(up.origin);
      const cancel = new Cancellation();
      cancel.abort();

      const m = await mappedFailure(call(p, { path: '/cancelled', signal: cancel }), {
        timedOut: false,
        midBody: false,
      });
      expect((m.original as Error).name).toBe('AbortError');
      // A call after it, through the same single-connection pool, reaches the upstream: had the cancelled
      // one been sent, the upstream would have seen it first.
      const after = await call(p, { path: '/after' });
      expect((await readAll(after.body)).toString()).toBe('answer to /after');
      expect(up.exchanges.map((e) => e.path)).toEqual(['/after']);
      // Refused before undici: no keep-alive connection was taken for it and closed.
      expect(up.connections).toBe(1);
      expect(mapped).toHaveLength(1);
    });
  });

  describe('total deadline', () => {
    it('rejects next() as timed out when the body outlasts totalMs', async () => {
      const up = await upstream((_req, res) => talkForever(res, 'data: tick\n\n', 50));
      const p = pool(up.origin);

      const startedAt = Date.now();
      const answer = await call(p, { totalMs: 200 });
      let chunks = 0;
      const failure = (async () => {
        for (;;) {
          const next = await answer.body.next();
          if (next.done) return new Error('the body ended');
          chunks++;
        }
      })();
      await mappedFailure(failure, { timedOut: true, midBody: true });
      const elapsed = Date.now() - startedAt;
      expect(elapsed).toBeGreaterThanOrEqual(190);
      expect(elapsed).toBeLessThan(1_500);
      expect(chunks).toBeGreaterThan(1);
      const exchange = up.exchanges[0] as Exchange;
      await until('the upstream sees the request closed', () => exchange.cut, 1_000);
      expect(mapped).toHaveLength(1);
    });

    it('rejects the start as timed out when the headers come after totalMs', async () => {
      const up = await upstream((_req, res) => {
        const timer = setTimeout(() => res.end('too late'), 3_000);
        res.on('close', () => clearTimeout(timer));
      });
      const p = pool(up.origin);

      const startedAt = Date.now();
      await mappedFailure(call(p, { totalMs: 200 }), { timedOut: true, midBody: false });
      const elapsed = Date.now() - startedAt;
      expect(elapsed).toBeGreaterThanOrEqual(190);
      expect(elapsed).toBeLessThan(1_500);
      const exchange = up.exchanges[0] as Exchange;
      await until('the upstream sees the request closed', () => exchange.cut, 1_000);
      expect(mapped).toHaveLength(1);
    });
  });

  it('resolves an error status like any other, with its body readable', async () => {
    const errorBody = JSON.stringify({ error: { message: 'the model is overloaded', type: 'server_error' } });
    const up = await upstream((_req, res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(errorBody);
    });
    const p = pool(up.origin);

    const answer = await call(p, { method: 'POST', path: '/v1/chat/completions', body: '{"model":"m"}' });
    expect(answer.status).toBe(500);
    expect(answer.headers['content-type']).toBe('application/json');
    expect((await readAll(answer.body)).toString()).toBe(errorBody);
    expect(mapped).toEqual([]);
  });
});
