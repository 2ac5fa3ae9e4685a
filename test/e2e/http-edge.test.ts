/**
 * Bad callers at the HTTP edge get a documented error from the catalogue (src/errors.ts) in its
 * envelope: never a 500, a hang, or an answer of fastify's or Node's own making.
 */
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CATALOG } from '../../src/errors.js';
import { MAX_JSON_DEPTH } from '../../src/json-depth.js';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { restCall } from '../helpers/rest.js';
import { until, waitFor } from '../helpers/wait.js';

/** One raw HTTP/1.1 exchange: what the server wrote until it closed the connection. */
function rawExchange(origin: string, text: string | Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(new URL(origin).port), '127.0.0.1');
    let answer = '';
    socket.on('data', (chunk: Buffer) => {
      answer += chunk.toString('utf8');
    });
    socket.on('close', () => resolve(answer));
    socket.on('error', reject);
    socket.write(text);
  });
}

function parseRaw(answer: string): { status: number; headers: string; body: Record<string, unknown> } {
  const end = answer.indexOf('\r\n\r\n');
  const headers = answer.slice(0, end).toLowerCase();
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1]);
  return { status, headers, body: JSON.parse(answer.slice(end + 4)) as Record<string, unknown> };
}

/** A socket that records what it receives and when it closes. */
function openSocket(origin: string): {
  socket: Socket;
  received: () => string;
  closedAt: () => number | undefined;
} {
  const socket = connect(Number(new URL(origin).port), '127.0.0.1');
  let received = '';
  let closedAt: number | undefined;
  socket.on('data', (chunk: Buffer) => {
    received += chunk.toString();
  });
  socket.on('error', () => {});
  socket.on('close', () => {
    closedAt = Date.now();
  });
  return { socket, received: () => received, closedAt: () => closedAt };
}

const restError = (errorId: string, status: number) => ({
  status: false,
  error: { error_id: errorId, http_status: status },
});

describe('the HTTP edge', () => {
  let gantry: TestGantry;
  beforeAll(async () => {
    gantry = await startGantry(LOCAL_CONFIG);
  });
  afterAll(() => gantry.close());

  const call = (method: string, path: string, options: Parameters<typeof restCall>[3] = { key: null }) =>
    restCall<Record<string, unknown>>(gantry.origin, method, path, {
      ...options,
      key: options.key ?? gantry.key,
    });

  describe('routes that take no body accept an empty one whatever its Content-Type', () => {
    const types = ['application/json', 'text/plain', 'application/x-www-form-urlencoded'];

    it('DELETE /v1/predictions/{id}, cancel and the delete aliases', async () => {
      for (const contentType of types) {
        const created = await call('POST', '/v1/predictions', {
          key: gantry.key,
          body: { model: 'acme/image-gen', input: { prompt: 'x' } },
        });
        expect(created.status, created.text).toBe(200);
        const id = String(created.body.id);
        // An empty body sent with the Content-Type (Content-Length: 0).
        const empty = { key: gantry.key, raw: '', contentType };
        const cancel = await call('POST', `/v1/predictions/${id}/cancel`, empty);
        expect([200, 409], `${contentType}: ${cancel.text}`).toContain(cancel.status);
        const removed = await call('DELETE', `/v1/predictions/${id}`, empty);
        expect(removed.status, `${contentType}: ${removed.text}`).toBe(200);
        expect(removed.body).toEqual({ success: true });
        const again = await call('POST', `/v1/predictions/${id}/delete`, empty);
        expect(again.status, again.text).toBe(404);
        expect(again.body).toMatchObject(restError('PREDICTION_NOT_FOUND', 404));
      }
    });

    it('GET routes too; a route that needs a body still refuses a missing one with 400', async () => {
      const headers = { 'content-type': 'application/json' };
      const models = await call('GET', '/v1/models', { key: gantry.key, headers });
      expect(models.status, models.text).toBe(200);
      const chat = await call('POST', '/v1/chat/completions', { key: gantry.key, raw: '' });
      expect(chat.status, chat.text).toBe(400);
      expect(chat.body).toMatchObject({ error: { error_id: 'INVALID_REQUEST', http_status: 400 } });
    });
  });

  describe('a repeated query parameter is 400 INVALID_PARAMETER naming it', () => {
    it.each([
      ['/v1/models?vendor=a&vendor=b', 'vendor'],
      ['/v1/models/gantry/local-chat?fields=input_schema&fields=output_schema', 'fields'],
      ['/v1/predictions?page=1&page=2', 'page'],
      ['/healthz?x=1&x=2', 'x'],
    ])('%s', async (path, name) => {
      const res = await call('GET', path);
      expect(res.status, res.text).toBe(400);
      expect(res.body).toMatchObject({
        status: false,
        error: { error_id: 'INVALID_PARAMETER', http_status: 400, details: name },
      });
      expect(String((res.body.error as { message: string }).message)).toContain(name);
    });

    it('in the inference envelope with param on inference routes', async () => {
      const res = await call('POST', '/v1/chat/completions?stream=1&stream=2', {
        key: gantry.key,
        body: { model: 'gantry/local-chat', messages: [{ role: 'user', content: 'hi' }] },
      });
      expect(res.status, res.text).toBe(400);
      expect(res.body).toMatchObject({ error: { error_id: 'INVALID_PARAMETER', param: 'stream' } });
    });
  });

  describe(`JSON nested deeper than ${MAX_JSON_DEPTH} levels is 400 INVALID_PARAMETER naming the field`, () => {
    const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

    it('a prediction input 5,000 deep', async () => {
      const res = await call('POST', '/v1/predictions', {
        key: gantry.key,
        raw: `{"model":"acme/image-gen","input":{"prompt":${nested(5_000)}}}`,
      });
      expect(res.status, res.text.slice(0, 300)).toBe(400);
      expect(res.body).toMatchObject(restError('INVALID_PARAMETER', 400));
      expect(String((res.body.error as { details: string }).details)).toMatch(/^input\.prompt/);
    });

    it('on the fast path (chat) and on fastify (responses with a query string), with param', async () => {
      for (const path of ['/v1/chat/completions', '/v1/responses?x=1']) {
        const res = await call('POST', path, {
          key: gantry.key,
          raw: `{"model":"gantry/local-chat","messages":[{"role":"user","content":"hi"}],"input":"hi","tools":${nested(5_000)}}`,
        });
        expect(res.status, `${path}: ${res.text.slice(0, 300)}`).toBe(400);
        expect(res.body).toMatchObject({ error: { error_id: 'INVALID_PARAMETER', http_status: 400 } });
        expect(String((res.body.error as { param: string }).param)).toMatch(/^tools\[0\]/);
      }
    });

    it(`${MAX_JSON_DEPTH} levels are accepted (the error is another one)`, async () => {
      // The body object is level 1, `metadata` holds the levels below it.
      const res = await call('POST', '/v1/chat/completions', {
        key: gantry.key,
        raw: `{"model":"gantry/local-chat","messages":[{"role":"user","content":"hi"}],"metadata":${nested(MAX_JSON_DEPTH - 1)}}`,
      });
      expect(res.text).not.toContain('nests JSON deeper');
      const over = await call('POST', '/v1/chat/completions', {
        key: gantry.key,
        raw: `{"model":"gantry/local-chat","messages":[{"role":"user","content":"hi"}],"metadata":${nested(MAX_JSON_DEPTH)}}`,
      });
      expect(over.status).toBe(400);
      expect(over.text).toContain('nests JSON deeper');
    });
  });

  describe('errors before any route are in the envelope', () => {
    const key = () => `x-api-key: ${gantry.key}\r\n`;

    it('a path that is not validly percent-encoded: 400 INVALID_REQUEST', async () => {
      const res = parseRaw(
        await rawExchange(
          gantry.origin,
          `GET /v1/predictions/% HTTP/1.1\r\nhost: x\r\n${key()}connection: close\r\n\r\n`,
        ),
      );
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject(restError('INVALID_REQUEST', 400));
    });

    it('a 101-character id: 414 URI_TOO_LONG', async () => {
      const res = parseRaw(
        await rawExchange(
          gantry.origin,
          `GET /v1/predictions/${'a'.repeat(101)} HTTP/1.1\r\nhost: x\r\n${key()}connection: close\r\n\r\n`,
        ),
      );
      expect(res.status).toBe(414);
      expect(res.body).toMatchObject(restError('URI_TOO_LONG', 414));
    });

    it('an unknown method: 405 METHOD_NOT_ALLOWED', async () => {
      const res = parseRaw(
        await rawExchange(gantry.origin, `FOO /v1/models HTTP/1.1\r\nhost: x\r\n${key()}\r\n`),
      );
      expect(res.status).toBe(405);
      expect(res.body).toMatchObject(restError('METHOD_NOT_ALLOWED', 405));
    });

    it("Node's parser errors: a malformed header 400 INVALID_REQUEST, oversized headers 431", async () => {
      const bad = parseRaw(
        await rawExchange(gantry.origin, 'GET /v1/models HTTP/1.1\r\nhost: x\r\nno colon\r\n\r\n'),
      );
      expect(bad.status).toBe(400);
      expect(bad.body).toMatchObject(restError('INVALID_REQUEST', 400));
      const big = parseRaw(
        await rawExchange(
          gantry.origin,
          `GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: ${'y'.repeat(40_000)}\r\n\r\n`,
        ),
      );
      expect(big.status).toBe(431);
      expect(big.body).toMatchObject(restError('HEADERS_TOO_LARGE', 431));
    });

    it('the README error table lists exactly the catalogue', () => {
      const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
      const table = readme.slice(readme.indexOf('| error_id |'));
      const rows = [...table.matchAll(/^\| `([A-Z_]+)` \| (\d{3}) \|/gm)].map((m) => [m[1], Number(m[2])]);
      const catalogue = Object.entries(ERROR_CATALOG).map(([id, entry]) => [id, entry.status]);
      expect(rows.sort()).toEqual(catalogue.sort());
    });
  });

  describe('a finished prediction’s stream ends at once', () => {
    it('resumed with Last-Event-ID at or past its last event: its done event, then the end', async () => {
      const created = await call('POST', '/v1/predictions', {
        key: gantry.key,
        body: { model: 'acme/image-gen', input: { prompt: 'x' }, stream: true, await: true },
      });
      expect(created.body.status).toBe('succeeded');
      const id = String(created.body.id);
      const whole = await fetch(`${gantry.origin}/v1/predictions/${id}/stream`, {
        headers: { 'x-api-key': gantry.key },
      }).then((r) => r.text());
      const lastId = Number([...whole.matchAll(/^id: (\d+)$/gm)].at(-1)?.[1]);
      expect(whole).toContain(`id: ${lastId}\nevent: done\n`);
      for (const resumeAt of [lastId, lastId + 50]) {
        const res = await fetch(`${gantry.origin}/v1/predictions/${id}/stream`, {
          headers: { 'x-api-key': gantry.key, 'last-event-id': String(resumeAt) },
          signal: AbortSignal.timeout(3_000),
        });
        const text = await res.text();
        expect(text).toBe(`id: ${resumeAt}\nevent: done\ndata: {"status":"succeeded"}\n\n`);
      }
    });
  });
});

describe('server timeouts and the per-address connection cap', () => {
  let gantry: TestGantry;
  beforeAll(async () => {
    gantry = await startGantry(
      LOCAL_CONFIG.replace(
        'providers:',
        'server: { headers_timeout_ms: 300, request_timeout_ms: 600, keep_alive_timeout_ms: 300 }\nproviders:',
      ).replace('local: { kind: local }', 'local: { kind: local, chunk_delay_ms: 100 }'),
    );
  });
  afterAll(() => gantry.close());

  /** Sends `text` a byte at a time every `everyMs` until the socket closes. */
  function trickle(socket: Socket, text: string, everyMs: number): void {
    let at = 0;
    const timer = setInterval(() => {
      if (socket.destroyed || at >= text.length) return clearInterval(timer);
      socket.write(text[at++] as string);
    }, everyMs);
    socket.once('close', () => clearInterval(timer));
  }

  it('closes a connection whose headers trickle in, with 408 REQUEST_TIMEOUT', async () => {
    const started = Date.now();
    const conn = openSocket(gantry.origin);
    trickle(conn.socket, `GET /v1/models HTTP/1.1\r\nhost: x\r\nx-api-key: ${gantry.key}\r\n\r\n`, 50);
    const closedAt = await waitFor('the server to close the connection', () => conn.closedAt(), 3_000);
    expect(closedAt - started).toBeLessThan(2_000);
    expect(parseRaw(conn.received()).body).toMatchObject(restError('REQUEST_TIMEOUT', 408));
  });

  it('closes a connection whose body trickles in, with 408 REQUEST_TIMEOUT, with or without a key', async () => {
    for (const auth of [`x-api-key: ${gantry.key}\r\n`, '']) {
      const started = Date.now();
      const conn = openSocket(gantry.origin);
      const body = JSON.stringify({
        model: 'gantry/local-chat',
        messages: [{ role: 'user', content: 'hi' }],
      });
      conn.socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n${auth}content-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`,
      );
      trickle(conn.socket, body, 50);
      const closedAt = await waitFor('the server to close the connection', () => conn.closedAt(), 3_000);
      expect(closedAt - started).toBeLessThan(2_000);
      if (auth !== '')
        expect(parseRaw(conn.received()).body).toMatchObject(restError('REQUEST_TIMEOUT', 408));
    }
  });

  it('does not cut an answer that takes longer than request_timeout_ms (a slow stream)', async () => {
    const started = Date.now();
    const res = await fetch(`${gantry.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-api-key': gantry.key, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'gantry/local-chat',
        stream: true,
        messages: [{ role: 'user', content: 'tell me something long enough' }],
      }),
    });
    const text = await res.text();
    expect(Date.now() - started).toBeGreaterThan(1_000);
    expect(text.trim().endsWith('data: [DONE]')).toBe(true);
  });

  it('closes an idle keep-alive connection', async () => {
    const conn = openSocket(gantry.origin);
    conn.socket.write(`GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n`);
    await until('the answer', () => conn.received().includes('"ok"'));
    const answeredAt = Date.now();
    const closedAt = await waitFor('the server to close the idle connection', () => conn.closedAt(), 3_000);
    expect(closedAt - answeredAt).toBeLessThan(1_500);
  });
});

describe('the per-address connection cap', () => {
  let gantry: TestGantry;
  beforeAll(async () => {
    gantry = await startGantry(
      LOCAL_CONFIG.replace('providers:', 'server: { max_connections_per_ip: 4 }\nproviders:'),
    );
  });
  afterAll(() => gantry.close());

  it('refuses a connection over max_connections_per_ip with 429, and takes one again once another closes', async () => {
    const held = Array.from({ length: 4 }, () => openSocket(gantry.origin));
    // Each one is accepted and counted: it gets an answer and stays open (keep-alive).
    for (const conn of held) conn.socket.write('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');
    await until('four answers', () => held.every((c) => c.received().includes('"ok"')));
    const refused = openSocket(gantry.origin);
    refused.socket.write('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');
    await waitFor('the refused connection to close', () => refused.closedAt(), 3_000);
    const answer = parseRaw(refused.received());
    expect(answer.status).toBe(429);
    expect(answer.body).toMatchObject(restError('RATE_LIMIT_EXCEEDED', 429));
    expect(held.every((c) => c.closedAt() === undefined)).toBe(true);

    held[0]?.socket.destroy();
    await until('the server to count the closed one', async () => {
      const again = await rawExchange(
        gantry.origin,
        'GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n',
      );
      return again.startsWith('HTTP/1.1 200');
    });
    for (const conn of held) conn.socket.destroy();
  });
});

describe('shutting down', () => {
  it('answers a request that arrives while the server closes with 503 SERVICE_UNAVAILABLE in the envelope', async () => {
    const gantry = await startGantry(
      LOCAL_CONFIG.replace('local: { kind: local }', 'local: { kind: local, chunk_delay_ms: 100 }'),
    );
    const conn = openSocket(gantry.origin);
    const body = JSON.stringify({
      model: 'gantry/local-chat',
      stream: true,
      messages: [{ role: 'user', content: 'a slow stream' }],
    });
    conn.socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-api-key: ${gantry.key}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
    );
    await until('the stream to begin', () => conn.received().includes('data: '));
    const closed = gantry.close();
    // The same connection, busy with the stream, sends one more request while the server closes.
    conn.socket.write(`GET /v1/models HTTP/1.1\r\nhost: x\r\nx-api-key: ${gantry.key}\r\n\r\n`);
    await closed;
    await waitFor('the connection to close', () => conn.closedAt(), 5_000);
    const second = conn.received().slice(conn.received().lastIndexOf('HTTP/1.1 '));
    expect(second).toMatch(/^HTTP\/1\.1 503/);
    expect(parseRaw(second).body).toMatchObject(restError('SERVICE_UNAVAILABLE', 503));
  });
});
