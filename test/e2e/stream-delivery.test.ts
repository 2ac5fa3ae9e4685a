/**
 * How a chat stream's bytes travel through Gantry, seen from both wires: an upstream written here with
 * node:http (so each test decides exactly how the bytes are written) and a client speaking HTTP/1.1 by
 * hand on a socket (so it sees the chunked-encoding frames and can stop reading).
 *
 * - the events one upstream read brings go out together, not one chunked frame each;
 * - a client that stops reading holds the upstream back (Gantry waits for 'drain', it does not buffer);
 * - a client that leaves while Gantry waits for 'drain' ends the upstream call at once.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { UsageRecord } from '../../src/usage/record.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { parseSse } from '../helpers/sse-events.js';
import { ledgerRecords } from '../helpers/usage.js';
import { sleep, until } from '../helpers/wait.js';

const UPSTREAM_KEY = 'sk-upstream-stream-delivery-0123456789';

/** 40 content chunks, all in one upstream write. */
const BURST_PIECES = Array.from({ length: 40 }, (_, i) => `${i === 0 ? '' : ' '}word${i}`);
/**
 * Many large events: far more than every buffer between upstream and client holds. Those are mostly the
 * kernel's: on Linux each loopback socket's send buffer grows up to net.ipv4.tcp_wmem's max (4 MB by
 * default), and two of them are on the way (upstream → Gantry, Gantry → client), so about 8 MB leave the
 * upstream however well Gantry waits for 'drain'. Gantry itself holds a few hundred KB.
 */
const FLOOD_EVENTS = 8_000;
const FLOOD_CONTENT_CHARS = 4_000;

function floodContent(i: number): string {
  const head = `[${i}]`;
  const filler = ' lorem ipsum dolor sit amet consectetur';
  return (head + filler.repeat(Math.ceil(FLOOD_CONTENT_CHARS / filler.length))).slice(0, FLOOD_CONTENT_CHARS);
}

// ---------------------------------------------------------------------------------------------------
// The upstream: OpenAI's chat.completion.chunk stream, byte for byte.

interface UpstreamCall {
  model: string;
  body: Record<string, unknown>;
  /** Bytes of SSE the upstream handed to res.write (accepted by node, maybe not yet sent). */
  written: number;
  /** Everything was written and the response ended. */
  finished: boolean;
  /** The response closed before it was finished: Gantry went away. */
  abortedAt: number | undefined;
}

const CREATED = 1_700_000_000;

function chunkJson(id: string, model: string, delta: string, finish: string, nullUsage: boolean): string {
  return (
    `{"id":"${id}","object":"chat.completion.chunk","created":${CREATED},"model":"${model}",` +
    `"system_fingerprint":"fp_delivery","choices":[{"index":0,"delta":${delta},"logprobs":null,` +
    `"finish_reason":${finish}}]${nullUsage ? ',"usage":null' : ''}}`
  );
}

function usageJson(id: string, model: string, completionTokens: number): string {
  return (
    `{"id":"${id}","object":"chat.completion.chunk","created":${CREATED},"model":"${model}",` +
    `"system_fingerprint":"fp_delivery","choices":[],"usage":{"prompt_tokens":9,` +
    `"completion_tokens":${completionTokens},"total_tokens":${9 + completionTokens},` +
    `"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":` +
    `{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`
  );
}

const frame = (json: string) => `data: ${json}\n\n`;

/**
 * The frames of a whole chat stream, as OpenAI writes them: a role chunk, one chunk per piece, the finish
 * chunk, the usage chunk when asked for (`"usage":null` on every chunk before it), then [DONE].
 */
function* chatStream(
  call: UpstreamCall,
  count: number,
  pieceOf: (i: number) => string,
  id: string,
): Generator<string> {
  const withUsage =
    (call.body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
  yield frame(
    chunkJson(id, call.model, '{"role":"assistant","content":"","refusal":null}', 'null', withUsage),
  );
  for (let i = 0; i < count; i++) {
    yield frame(chunkJson(id, call.model, `{"content":${JSON.stringify(pieceOf(i))}}`, 'null', withUsage));
  }
  yield frame(chunkJson(id, call.model, '{}', '"stop"', withUsage));
  if (withUsage) yield frame(usageJson(id, call.model, count));
  yield 'data: [DONE]\n\n';
}

function floodStream(call: UpstreamCall): Generator<string> {
  return chatStream(call, FLOOD_EVENTS, floodContent, 'chatcmpl-flood');
}

function waitForDrain(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

async function answer(call: UpstreamCall, req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (req.headers.authorization !== `Bearer ${UPSTREAM_KEY}`) {
    res.writeHead(401, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"bad key","type":"invalid_request_error"}}');
    return;
  }
  if (call.body.stream !== true) {
    const body = JSON.stringify({
      id: 'chatcmpl-json',
      object: 'chat.completion',
      created: CREATED,
      model: call.model,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'still here' },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 },
    });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
    call.finished = true;
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  if (call.model === 'burst-model') {
    // One socket write for the whole stream: Gantry gets it in one read.
    const text = [
      ...chatStream(call, BURST_PIECES.length, (i) => BURST_PIECES[i] as string, 'chatcmpl-burst'),
    ].join('');
    res.write(text);
    call.written += Buffer.byteLength(text);
    res.end();
    call.finished = true;
    return;
  }
  if (call.model === 'flood-model') {
    // As a well-behaved server streams: write while node takes it, wait for 'drain' when it does not.
    for (const text of floodStream(call)) {
      if (res.destroyed) return;
      const more = res.write(text);
      call.written += Buffer.byteLength(text);
      if (!more) await waitForDrain(res);
    }
    if (res.destroyed) return;
    res.end();
    call.finished = true;
    return;
  }
  res.writeHead(404);
  res.end();
}

let upstream: Server;
const calls: UpstreamCall[] = [];

function startUpstream(): Promise<string> {
  upstream = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (part: Buffer) => parts.push(part));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(parts).toString('utf8')) as Record<string, unknown>;
      const call: UpstreamCall = {
        model: String(body.model),
        body,
        written: 0,
        finished: false,
        abortedAt: undefined,
      };
      calls.push(call);
      res.on('close', () => {
        if (!res.writableFinished) call.abortedAt = Date.now();
      });
      void answer(call, req, res);
    });
  });
  return new Promise((resolve) => {
    upstream.listen(0, '127.0.0.1', () => {
      const { port } = upstream.address() as { port: number };
      resolve(`http://127.0.0.1:${port}/v1`);
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// The client: HTTP/1.1 by hand, chunked transfer-encoding decoded frame by frame.

/** A response read off the socket: status line and headers, then the chunked body frame by frame. */
class ChunkedResponse {
  head: string | undefined;
  /** Chunked-encoding frames of the body (the terminating zero-size one not counted). */
  frames = 0;
  done = false;
  private readonly parts: Buffer[] = [];
  private pending: Buffer = Buffer.alloc(0);
  /** Bytes of the current frame still to come; -1 while reading a size line, -2 for the CRLF after data. */
  private remaining = -1;

  push(data: Buffer): void {
    let buf = this.pending.length === 0 ? data : Buffer.concat([this.pending, data]);
    for (;;) {
      if (this.done) break;
      if (this.head === undefined) {
        const end = buf.indexOf('\r\n\r\n');
        if (end === -1) break;
        this.head = buf.subarray(0, end).toString('latin1');
        buf = buf.subarray(end + 4);
      } else if (this.remaining > 0) {
        if (buf.length === 0) break;
        const take = Math.min(this.remaining, buf.length);
        this.parts.push(buf.subarray(0, take));
        buf = buf.subarray(take);
        this.remaining -= take;
        if (this.remaining === 0) this.remaining = -2;
      } else if (this.remaining === -2) {
        if (buf.length < 2) break;
        if (buf.toString('latin1', 0, 2) !== '\r\n') throw new Error('chunked frame not followed by CRLF');
        buf = buf.subarray(2);
        this.remaining = -1;
      } else {
        const end = buf.indexOf('\r\n');
        if (end === -1) break;
        const sizeLine = buf.subarray(0, end).toString('latin1');
        if (!/^[0-9a-fA-F]+$/.test(sizeLine))
          throw new Error(`bad chunk-size line ${JSON.stringify(sizeLine)}`);
        const size = Number.parseInt(sizeLine, 16);
        if (size === 0) {
          // The last chunk: no trailers, then the final CRLF.
          if (buf.length < end + 4) break;
          if (buf.toString('latin1', end + 2, end + 4) !== '\r\n')
            throw new Error('trailers are not expected');
          buf = buf.subarray(end + 4);
          this.done = true;
          break;
        }
        buf = buf.subarray(end + 2);
        this.frames++;
        this.remaining = size;
      }
    }
    // What is left is at most a size line or a CRLF: copying it costs nothing.
    this.pending = Buffer.from(buf);
  }

  status(): number {
    return Number(/^HTTP\/1\.1 (\d{3})/.exec(this.head ?? '')?.[1]);
  }

  header(name: string): string | undefined {
    const re = new RegExp(`^${name}:\\s*(.*)$`, 'im');
    return re.exec(this.head ?? '')?.[1]?.trim();
  }

  body(): string {
    return Buffer.concat(this.parts).toString('utf8');
  }
}

interface RawStream {
  socket: Socket;
  response: ChunkedResponse;
  /** Resolves once the status line and headers are in (and, with pauseAfterHeaders, the socket paused). */
  headers: Promise<void>;
  /** Resolves at the terminating zero-size chunk; rejects when the socket fails or closes before it. */
  complete: Promise<void>;
}

const sockets = new Set<Socket>();

function postRaw(body: unknown, options: { pauseAfterHeaders?: boolean } = {}): RawStream {
  const { port } = new URL(gantry.origin);
  const payload = JSON.stringify(body);
  const socket = connect(Number(port), '127.0.0.1');
  sockets.add(socket);
  socket.write(
    'POST /v1/chat/completions HTTP/1.1\r\n' +
      `Host: 127.0.0.1:${port}\r\n` +
      `Authorization: Bearer ${gantry.key}\r\n` +
      'Content-Type: application/json\r\n' +
      `Content-Length: ${Buffer.byteLength(payload)}\r\n` +
      '\r\n' +
      payload,
  );
  const response = new ChunkedResponse();
  let headersIn!: () => void;
  let completed!: () => void;
  let failed!: (err: Error) => void;
  const headers = new Promise<void>((resolve) => {
    headersIn = resolve;
  });
  const complete = new Promise<void>((resolve, reject) => {
    completed = resolve;
    failed = reject;
  });
  // Not every test waits on it: a failure still fails the test that does.
  complete.catch(() => undefined);
  let paused = false;
  socket.on('data', (data: Buffer) => {
    response.push(data);
    if (response.head !== undefined) {
      if (options.pauseAfterHeaders && !paused) {
        paused = true;
        socket.pause();
      }
      headersIn();
    }
    if (response.done) completed();
  });
  socket.on('error', (err) => failed(err));
  socket.on('close', () => failed(new Error('the socket closed before the end of the response')));
  return { socket, response, headers, complete };
}

function withDeadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what} (after ${ms} ms)`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/** Waits until the upstream has written nothing more for `quietMs`: it is being held back (or is done). */
async function untilUpstreamStalls(call: UpstreamCall, quietMs = 300, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = -1;
  let since = Date.now();
  for (;;) {
    if (call.written !== last) {
      last = call.written;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) {
      return;
    }
    if (Date.now() > deadline) throw new Error(`the upstream never stopped writing (${call.written} bytes)`);
    await sleep(20);
  }
}

async function waitForCall(model: string, index: number): Promise<UpstreamCall> {
  let found: UpstreamCall | undefined;
  await until(`upstream call #${index + 1} for ${model}`, () => {
    found = calls.filter((c) => c.model === model)[index];
    return found !== undefined;
  });
  return found as UpstreamCall;
}

function dataOf(text: string): string[] {
  return parseSse(text).map((event) => event.data);
}

function contentOf(data: string): string | undefined {
  const chunk = JSON.parse(data) as { choices?: Array<{ delta?: { content?: unknown } }> };
  const content = chunk.choices?.[0]?.delta?.content;
  return typeof content === 'string' && content !== '' ? content : undefined;
}

// ---------------------------------------------------------------------------------------------------

let gantry: TestGantry;
/** Gantry's log lines, parsed. */
const logs: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  const url = await startUpstream();
  gantry = await startGantry(
    `
providers:
  up:
    kind: openai
    base_url: ${url}
    api_key_env: UP_KEY
    timeouts: { connect_ms: 1000, first_byte_ms: 30000, idle_ms: 30000, total_ms: 30000 }
models:
  - namespace: delivery/burst
    name: One upstream write
    type: text
    routes: [{ provider: up, model: burst-model }]
  - namespace: delivery/flood
    name: A large stream
    type: text
    routes: [{ provider: up, model: flood-model }]
  - namespace: delivery/flood-left
    name: A large stream whose client leaves
    type: text
    routes: [{ provider: up, model: flood-model }]
  - namespace: delivery/plain
    name: A plain answer
    type: text
    routes: [{ provider: up, model: plain-model }]
`,
    { UP_KEY: UPSTREAM_KEY },
    { onLog: (line) => logs.push(JSON.parse(line) as Record<string, unknown>) },
  );
});

afterEach(() => {
  for (const socket of sockets) socket.destroy();
  sockets.clear();
});

afterAll(async () => {
  await gantry?.close();
  upstream?.closeAllConnections();
  await new Promise((resolve) => upstream?.close(resolve));
});

function testAccountId(): string {
  const account = gantry.store.getAccountByName('test');
  if (!account) throw new Error('the test account exists');
  return account.id;
}

/** The usage record of the only call to `model`, once written. */
async function recordOf(model: string): Promise<UsageRecord | undefined> {
  let record: UsageRecord | undefined;
  await until(
    `the usage record of ${model}`,
    async () => {
      const records = await ledgerRecords(gantry, testAccountId(), 1, 0);
      record = records.find((r) => r.model === model);
      return record !== undefined;
    },
    3_000,
    20,
  );
  return record;
}

const user = (content: string) => [{ role: 'user', content }];
/** The client reads the response headers (and what came with them), then stops reading. */
const PAUSED = { pauseAfterHeaders: true };

describe('stream delivery through Gantry', () => {
  it('sends the events of one upstream read in a few chunked frames, intact and in order', async () => {
    const stream = postRaw({ model: 'delivery/burst', messages: user('burst'), stream: true });
    await withDeadline(stream.complete, 5_000, 'the whole response');
    const { response } = stream;
    expect(response.status()).toBe(200);
    expect(response.header('content-type')).toMatch(/^text\/event-stream/);
    expect(response.header('transfer-encoding')).toBe('chunked');

    // Gantry asked the upstream for usage, so every upstream chunk carried "usage":null.
    const call = await waitForCall('burst-model', 0);
    expect(call.body.stream_options).toEqual({ include_usage: true });
    expect(call.finished).toBe(true);

    const data = dataOf(response.body());
    // role, 40 pieces, finish, [DONE]: the usage chunk the client did not ask for is dropped.
    expect(data).toHaveLength(1 + BURST_PIECES.length + 1 + 1);
    expect(data.at(-1)).toBe('[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Record<string, unknown>);
    for (const chunk of chunks) {
      expect(chunk).toMatchObject({ object: 'chat.completion.chunk', model: 'delivery/burst' });
      expect(chunk).not.toHaveProperty('usage');
    }
    for (const d of data) expect(d).not.toContain('"usage"');
    expect(chunks[0]).toMatchObject({ choices: [{ delta: { role: 'assistant', content: '' } }] });
    expect(data.slice(1, -2).map(contentOf)).toEqual(BURST_PIECES);
    expect(chunks.at(-1)).toMatchObject({ choices: [{ delta: {}, finish_reason: 'stop' }] });

    // The point: 43 events, but not one frame each.
    expect(data.length).toBeGreaterThanOrEqual(42);
    expect(response.frames).toBeLessThan(10);

    // The dropped usage chunk was still read: the upstream's own numbers are metered.
    const record = await recordOf('delivery/burst');
    expect(record).toMatchObject({
      outcome: 'ok',
      stream: true,
      status: 200,
      input_tokens: 9,
      output_tokens: BURST_PIECES.length,
    });
  });

  it('holds the upstream back while the client does not read, then delivers every event', async () => {
    const stream = postRaw({ model: 'delivery/flood', messages: user('flood'), stream: true }, PAUSED);
    await withDeadline(stream.headers, 5_000, 'the response headers');
    const call = await waitForCall('flood-model', 0);
    let total = 0;
    for (const text of floodStream(call)) total += Buffer.byteLength(text);
    const pausedAt = Date.now();
    await untilUpstreamStalls(call);
    // Paused for long enough that a relay that ignored 'drain' would have taken the whole stream by now.
    const pausedFor = Date.now() - pausedAt;
    if (pausedFor < 1_000) await sleep(1_000 - pausedFor);
    const writtenWhilePaused = call.written;
    expect(call.finished).toBe(false);
    expect(writtenWhilePaused).toBeGreaterThan(0);
    expect(writtenWhilePaused).toBeLessThan(total / 2);

    stream.socket.resume();
    await withDeadline(stream.complete, 8_000, 'the rest of the stream');
    expect(call.finished).toBe(true);
    expect(call.written).toBe(total);

    const data = dataOf(stream.response.body());
    expect(data.at(-1)).toBe('[DONE]');
    // role, every piece, finish, [DONE]
    expect(data).toHaveLength(FLOOD_EVENTS + 3);
    const contents = data.slice(1, -2).map(contentOf);
    for (let i = 0; i < FLOOD_EVENTS; i++) {
      if (contents[i] !== floodContent(i)) {
        expect.fail(`event ${i + 1} arrived as ${JSON.stringify(contents[i]?.slice(0, 40))}…`);
      }
    }
    expect(JSON.parse(data.at(-2) ?? '{}')).toMatchObject({ choices: [{ finish_reason: 'stop' }] });
    expect(stream.response.body()).not.toContain('"usage"');
  }, 15_000);

  it('ends the upstream call when the client leaves while Gantry waits for drain, and keeps serving', async () => {
    const stream = postRaw({ model: 'delivery/flood-left', messages: user('flood'), stream: true }, PAUSED);
    await withDeadline(stream.headers, 5_000, 'the response headers');
    const call = await waitForCall('flood-model', 1);
    await untilUpstreamStalls(call);
    expect(call.finished).toBe(false);
    expect(call.abortedAt).toBeUndefined();

    const leftAt = Date.now();
    stream.socket.destroy();
    await until('the upstream request to be aborted', () => call.abortedAt !== undefined, 3_000);
    expect(call.finished).toBe(false);
    expect((call.abortedAt ?? Number.POSITIVE_INFINITY) - leftAt).toBeLessThan(3_000);
    // And Gantry's writer stopped waiting for a 'drain' that will never come: the stream ended.
    await until(
      "Gantry's stream to end as client_aborted",
      () => logs.some((line) => line.msg === 'stream' && line.stream === 'client_aborted'),
      3_000,
    );

    // Nothing is stuck: the next request is answered at once.
    const res = await fetch(`${gantry.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'delivery/plain', messages: user('anyone?') }),
      signal: AbortSignal.timeout(5_000),
    });
    expect(res.status).toBe(200);
    const completion = (await res.json()) as { choices: Array<{ message: { content: string } }> };
    expect(completion.choices[0]?.message.content).toBe('still here');

    const record = await recordOf('delivery/flood-left');
    expect(record).toMatchObject({ outcome: 'client_aborted', stream: true, status: 200 });
    // No usage came from the upstream: what went out was counted instead.
    expect(record?.output_tokens).toBeGreaterThan(0);
  }, 15_000);
});
