/**
 * `npm run fuzz`: sends seeded random requests to a Gantry of its own and fails on any answer a bad
 * caller should never get: a 5xx, an error outside the catalogue's envelopes (src/errors.ts), or no
 * answer within 10 s.
 *
 *   npm run fuzz -- [--seed N] [--count N] [--seconds N] [--concurrency N] [--max-string BYTES] [--only I]
 *
 * It lists every route and method from the fastify app itself (buildApp, not started), starts
 * `gantry serve` (src/main.ts under tsx) with the built-in local models on a random port and a temp
 * data dir, and sends requests over raw sockets, so malformed request lines, headers, lengths and
 * encodings reach the server as written. Request i depends only on the seed and i: a failure prints
 * the request, the answer and the command that sends that one request again (`--only i`).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { buildApp } from '../src/app.js';
import { parseConfig } from '../src/config/load.js';
import { ERROR_CATALOG, type ErrorId } from '../src/errors.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { type GantryProcess, spawnGantry } from '../test/helpers/gantry-process.js';

/** A request slower than this is a failure. */
const ANSWER_WITHIN_MS = 10_000;

export interface FuzzOptions {
  seed: number;
  /** Requests to send (fewer if `seconds` runs out first). */
  count: number;
  seconds: number;
  concurrency: number;
  /** Largest generated string in a body. */
  maxString: number;
  /** Send only request number `only` of the seed. */
  only?: number;
  log?: (line: string) => void;
}

export interface FuzzFailure {
  index: number;
  problem: string;
  request: string;
  answer: string;
}

export interface FuzzResult {
  sent: number;
  byStatus: Record<string, number>;
  failures: FuzzFailure[];
  elapsedMs: number;
  routes: number;
}

const CONFIG = `
server:
  headers_timeout_ms: 2000
  request_timeout_ms: 4000
providers:
  local: { kind: local }
tiers:
  default: {}
predictions:
  await_timeout_seconds: 3
models:
  - namespace: gantry/local-chat
    name: Local chat
    type: text
    vendor: { name: Gantry, slug: gantry }
    apis: [chat, responses]
    routes: [{ provider: local, model: local-chat }]
  - namespace: gantry/local-embed
    name: Local embeddings
    type: text
    vendor: { name: Gantry, slug: gantry }
    apis: [embeddings]
    routes: [{ provider: local, model: local-embed }]
  - namespace: gantry/local-image
    name: Local image
    type: image
    vendor: { name: Gantry, slug: gantry }
    serves: [predictions]
    routes: [{ provider: local, model: local-image }]
`;

interface Route {
  method: string;
  url: string;
}

/** What the requests can refer to: made once, before fuzzing. */
interface Targets {
  key: string;
  predictionIds: string[];
  /** Path and query of an output file link. */
  fileLinks: string[];
}

export async function runFuzz(options: FuzzOptions): Promise<FuzzResult> {
  const log = options.log ?? (() => {});
  const started = Date.now();
  const routes = await listRoutes();
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-fuzz-'));
  const configFile = join(dataDir, 'gantry.yaml');
  writeFileSync(configFile, CONFIG);
  const key = `gk_fuzz_${randomUUID().replaceAll('-', '')}`;
  let gantry: GantryProcess | undefined;
  try {
    gantry = await spawnGantry({
      config: configFile,
      dataDir,
      env: { GANTRY_BOOTSTRAP_KEY: key },
      name: 'fuzz',
    });
    const port = Number(new URL(gantry.origin).port);
    const targets = await prepare(gantry.origin, key);
    log(`fuzz: ${routes.length} routes, seed ${options.seed}, target ${gantry.origin}`);

    const result: FuzzResult = { sent: 0, byStatus: {}, failures: [], elapsedMs: 0, routes: routes.length };
    const deadline = Date.now() + options.seconds * 1000;
    const indexes =
      options.only === undefined ? Array.from({ length: options.count }, (_, i) => i) : [options.only];
    let next = 0;
    const worker = async () => {
      while (next < indexes.length && Date.now() < deadline) {
        const index = indexes[next++] as number;
        const request = generate(options.seed, index, routes, targets, options.maxString);
        const answer = await send(port, request);
        result.sent++;
        const label = answer.status === 0 ? 'none' : String(answer.status);
        result.byStatus[label] = (result.byStatus[label] ?? 0) + 1;
        const problem = judge(request, answer);
        if (problem !== undefined) {
          result.failures.push({
            index,
            problem,
            request: describeRequest(request),
            answer: describeAnswer(answer),
          });
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, options.concurrency) }, worker));
    if (gantry.dead) {
      result.failures.push({ index: -1, problem: 'Gantry exited', request: '', answer: gantry.output() });
    }
    result.elapsedMs = Date.now() - started;
    return result;
  } finally {
    await gantry?.stop(3_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** Every method and path the app registers, from the app itself. */
async function listRoutes(): Promise<Route[]> {
  const config = parseConfig(CONFIG, 'fuzz.yaml', {});
  const store = new SqliteStore(':memory:');
  const { app, routes } = await buildApp(config, store, { logger: false, processMetrics: false });
  await app.ready();
  await app.close();
  store.close();
  const seen = new Set<string>();
  return routes.filter((r) => {
    const id = `${r.method} ${r.url}`;
    if (seen.has(id)) return false;
    seen.add(id);
    return true;
  });
}

/** Predictions (one streamed) and an output file link that requests can refer to. */
async function prepare(origin: string, key: string): Promise<Targets> {
  const create = async (stream: boolean) => {
    const res = await fetch(`${origin}/v1/predictions`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gantry/local-image', input: { prompt: 'fuzz' }, stream, await: true }),
    });
    const body = (await res.json()) as {
      id: string;
      metadata?: { storage?: { files?: Array<{ url: string }> } };
    };
    if (res.status !== 200) throw new Error(`fuzz setup: create answered ${res.status}`);
    return body;
  };
  const first = await create(false);
  const second = await create(true);
  const fileLinks = [...(first.metadata?.storage?.files ?? []), ...(second.metadata?.storage?.files ?? [])]
    .map((f) => {
      const url = new URL(f.url);
      return url.pathname + url.search;
    })
    .filter((link) => link.startsWith('/v1/files/'));
  return { key, predictionIds: [first.id, second.id], fileLinks };
}

// ---------------------------------------------------------------------------------------------------
// Generation

interface FuzzRequest {
  index: number;
  method: string;
  /** Request target as written on the request line. */
  target: string;
  headers: Array<[string, string]>;
  body: Buffer;
}

/** mulberry32: a small seeded generator; request i uses its own stream, so it can be replayed alone. */
function generator(seed: number, index: number): () => number {
  let a = (Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(index + 1, 0xc2b2ae35)) >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Random {
  constructor(readonly next: () => number) {}
  chance(p: number): boolean {
    return this.next() < p;
  }
  int(max: number): number {
    return Math.floor(this.next() * max);
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)] as T;
  }
}

const METHODS = [
  'GET',
  'POST',
  'PUT',
  'PATCH',
  'DELETE',
  'OPTIONS',
  'HEAD',
  'FOO',
  'PROPFIND',
  'get',
  'TRACE',
];
const ODD_SEGMENTS = [
  '',
  '%',
  '%zz',
  '%00',
  '%2e%2e',
  '..',
  '%F0%9F%98%80',
  '%C3%A9',
  '%ff%fe',
  'a'.repeat(100),
  'a'.repeat(101),
  'x'.repeat(3000),
  'null',
  '__proto__',
  'constructor',
  '%20',
  '%2F',
  '00000000-0000-0000-0000-000000000000',
];
const QUERY_NAMES = [
  'fields',
  'vendor',
  'type',
  'status',
  'limit',
  'offset',
  'page',
  'per_page',
  'model',
  'from',
  'to',
  'token',
  'expires',
  'signature',
  '__proto__',
  'constructor',
  'a[b]',
  'unknown',
  '',
];
const QUERY_VALUES = [
  'input_schema',
  'output_schema,input_schema',
  'gantry',
  'text',
  'operational',
  '0',
  '1',
  '-1',
  '50',
  '1e309',
  '99999999999999999999',
  'NaN',
  '2026-01-01',
  '2026-13-45',
  'gantry/local-chat',
  '%',
  '%zz',
  '',
  'x'.repeat(2000),
];
const CONTENT_TYPES = [
  'application/json',
  'application/json; charset=utf-8',
  'application/JSON',
  'text/plain',
  'multipart/form-data; boundary=xyz',
  'application/x-www-form-urlencoded',
  'application/json; charset=latin1',
  'bogus',
  '',
  'application/json, text/plain',
];

function generate(
  seed: number,
  index: number,
  routes: Route[],
  targets: Targets,
  maxString: number,
): FuzzRequest {
  const r = new Random(generator(seed, index));
  const route = r.chance(0.05)
    ? { method: r.pick(METHODS), url: r.pick(['/', '/v2/x', '/v1', '/v1/nothing', '/internal/x']) }
    : r.pick(routes);
  const method = r.chance(0.1) ? r.pick(METHODS) : route.method;
  let path = fillPath(r, route.url, targets);
  if (r.chance(0.05)) path += r.pick(['/', '//', '%', '/..', '?', '#frag', ';a=b']);
  if (r.chance(0.01)) path = `/v1/${'long/'.repeat(5000)}`;
  const query = r.chance(0.4) ? makeQuery(r) : '';
  const target = path + (query === '' ? '' : (path.includes('?') ? '&' : '?') + query);

  const headers: Array<[string, string]> = [['host', '127.0.0.1']];
  const auth = r.int(10);
  if (auth < 6) headers.push(['x-api-key', targets.key]);
  else if (auth === 6) headers.push(['authorization', `Bearer ${targets.key}`]);
  else if (auth === 7)
    headers.push([
      'authorization',
      r.pick(['Bearer', 'Basic Zm9vOmJhcg==', `Bearer  ${targets.key} `, 'Bearer gk_wrong']),
    ]);
  else if (auth === 8)
    headers.push(['x-api-key', r.pick(['', 'gk_x', 'x'.repeat(5000), targets.key.toUpperCase()])]);
  if (r.chance(0.1)) headers.push(['accept', 'text/event-stream']);
  if (r.chance(0.1)) headers.push(['last-event-id', r.pick(['0', '1', '3', '999999', '-1', 'x', '1e30'])]);
  if (r.chance(0.1)) headers.push(['idempotency-key', r.pick(['k1', '', 'x'.repeat(300), randomKey(r)])]);
  if (r.chance(0.1))
    headers.push([
      'range',
      r.pick(['bytes=0-0', 'bytes=-5', 'bytes=999999999-', 'bytes=5-1', 'items=0-1', 'bytes=0-1,3-4']),
    ]);
  if (r.chance(0.05)) headers.push(['if-none-match', r.pick(['*', '"x"', 'W/"y"'])]);
  if (r.chance(0.05)) headers.push(['x-request-id', r.pick(['', 'x'.repeat(2000), 'req-1'])]);
  if (r.chance(0.01)) headers.push(['x-big', 'y'.repeat(20_000)]);

  const wantsBody = method === 'POST' || method === 'PUT' || method === 'PATCH' || r.chance(0.1);
  const body = wantsBody ? makeBody(r, path, maxString) : Buffer.alloc(0);
  if (wantsBody || r.chance(0.2)) {
    if (r.chance(0.85))
      headers.push(['content-type', r.chance(0.7) ? 'application/json' : r.pick(CONTENT_TYPES)]);
  }
  const framing = r.int(40);
  let payload = body;
  if (framing === 0) headers.push(['content-length', String(body.length + 10)]);
  else if (framing === 1 && body.length > 0) headers.push(['content-length', String(body.length - 1)]);
  else if (framing === 2)
    headers.push(['content-length', r.pick(['abc', '-1', '1e3', ' 5', '99999999999999999999'])]);
  else if (framing === 3) {
    headers.push(['transfer-encoding', 'chunked']);
    payload = Buffer.concat([
      Buffer.from(`${body.length.toString(16)}\r\n`),
      body,
      Buffer.from('\r\n0\r\n\r\n'),
    ]);
  } else if (framing === 4) {
    headers.push(['transfer-encoding', 'chunked']);
    payload = Buffer.concat([Buffer.from('zz\r\n'), body]);
  } else if (framing === 5) {
    headers.push(['content-length', String(body.length)], ['content-length', String(body.length + 1)]);
  } else if (body.length > 0 || r.chance(0.5)) headers.push(['content-length', String(body.length)]);
  headers.push(['connection', 'close']);
  return { index, method, target, headers, body: payload };
}

function randomKey(r: Random): string {
  return `k${r.int(1_000_000)}`;
}

function fillPath(r: Random, url: string, targets: Targets): string {
  if (url.startsWith('/v1/files/') && targets.fileLinks.length > 0 && r.chance(0.5)) {
    const link = r.pick(targets.fileLinks);
    return r.chance(0.7) ? link : link.replace(/signature=[^&]*/, 'signature=AAAA');
  }
  return url
    .replace(/:id\b/, () =>
      r.chance(0.5) ? r.pick(targets.predictionIds) : r.chance(0.5) ? randomUUID() : r.pick(ODD_SEGMENTS),
    )
    .replace(/:provider\b/, () => r.pick(['local', 'cog', 'x', '%']))
    .replace(/\*$/, () =>
      r.pick([
        'gantry/local-chat',
        'gantry%2Flocal-chat',
        'gantry/local-image',
        'nope',
        'audio/speech',
        'images/generations',
        'a/b/c/d',
        '../../etc/passwd',
        `${r.pick(targets.predictionIds)}/out-0.png`,
        ...ODD_SEGMENTS,
      ]),
    );
}

function makeQuery(r: Random): string {
  const parts: string[] = [];
  const n = 1 + r.int(4);
  for (let i = 0; i < n; i++) {
    const name = r.pick(QUERY_NAMES);
    const value = r.pick(QUERY_VALUES);
    parts.push(`${name}=${value}`);
    if (r.chance(0.3)) parts.push(`${name}=${r.pick(QUERY_VALUES)}`);
  }
  if (r.chance(0.1)) parts.push(r.pick(['', '=', '&&', 'x', '%', 'a=%zz']));
  return parts.join('&');
}

/** A body that starts from a plausible one for the path and is then bent. */
function makeBody(r: Random, path: string, maxString: number): Buffer {
  const kind = r.int(20);
  if (kind === 0) return Buffer.alloc(0);
  if (kind === 1)
    return Buffer.from(r.pick(['[]', 'null', '1', '"x"', 'true', '{}', '{"a":', '{,}', '\u0000', 'nul']));
  if (kind === 2) return Buffer.from(Array.from({ length: r.int(512) }, () => r.int(256)));
  if (kind === 3) {
    const depth = r.pick([128, 129, 5_000, 100_000]);
    return Buffer.from(`{"model":"gantry/local-chat","input":${'['.repeat(depth)}${']'.repeat(depth)}}`);
  }
  if (kind === 4 && r.chance(0.2)) {
    // Over the default body limit (4 MiB): 413.
    return Buffer.from(`{"model":"gantry/local-chat","input":"${'x'.repeat(4 * 1024 * 1024 + 1)}"}`);
  }
  const body = template(r, path);
  const mutations = r.int(4);
  for (let i = 0; i < mutations; i++) mutate(r, body, maxString);
  let text = JSON.stringify(body).replace(
    /"@@deep:(\d+)@@"/g,
    (_, depth: string) => `${'['.repeat(Number(depth))}${']'.repeat(Number(depth))}`,
  );
  if (r.chance(0.05)) text = text.slice(0, r.int(text.length));
  if (r.chance(0.03)) text = text.replace('{', '{"__proto__":{"x":1},');
  if (r.chance(0.03)) text = text.replace('{', '{"constructor":{"prototype":{"x":1}},');
  if (r.chance(0.03)) text = text.replace('"model"', '"\\u006dodel"');
  return Buffer.from(text);
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

function template(r: Random, path: string): Record<string, Json> {
  if (path.includes('/chat/')) {
    return {
      model: 'gantry/local-chat',
      messages: [{ role: 'user', content: 'hello' }],
      ...(r.chance(0.3) ? { stream: true } : {}),
      ...(r.chance(0.2) ? { max_tokens: 16 } : {}),
    };
  }
  if (path.includes('/embeddings')) return { model: 'gantry/local-embed', input: 'hello' };
  if (path.includes('/responses'))
    return { model: 'gantry/local-chat', input: 'hello', ...(r.chance(0.3) ? { stream: true } : {}) };
  if (path.includes('/predict')) {
    return {
      model: 'gantry/local-image',
      input: { prompt: 'a fox', ...(r.chance(0.3) ? { width: 64, height: 64 } : {}) },
      ...(r.chance(0.2) ? { stream: true } : {}),
      ...(r.chance(0.1) ? { await: true } : {}),
      ...(r.chance(0.1)
        ? { webhook: { url: r.pick(['http://127.0.0.1:1/x', 'not a url', 'ftp://x', 'http://10.0.0.1/']) } }
        : {}),
    };
  }
  if (path.startsWith('/internal/'))
    return { id: 'x', status: 'succeeded', output: 'data:text/plain;base64,eA==' };
  return { model: r.pick(['gantry/local-chat', 'gantry/local-image', 'nope']), prompt: 'x' };
}

function mutate(r: Random, body: Record<string, Json>, maxString: number): void {
  // Walk down a random path, then replace, remove or add something there.
  let node: Json = body;
  for (let depth = 0; depth < 3; depth++) {
    if (node === null || typeof node !== 'object') break;
    const keys: string[] = Object.keys(node);
    if (keys.length === 0 || r.chance(0.3)) break;
    const key: string = r.pick(keys);
    const child: Json | undefined = Array.isArray(node) ? node[Number(key)] : node[key];
    if (child === null || typeof child !== 'object') break;
    node = child;
  }
  if (node === null || typeof node !== 'object') return;
  const keys = Object.keys(node);
  const key =
    keys.length > 0 && r.chance(0.7) ? r.pick(keys) : r.pick(['unknown', 'n', 'tools', 'input', 'x-y', '']);
  const action = r.int(10);
  if (action === 0 && !Array.isArray(node)) {
    delete (node as Record<string, Json>)[key];
    return;
  }
  const value = randomValue(r, maxString);
  if (Array.isArray(node)) node[Number(key) || 0] = value;
  else node[key] = value;
}

function randomValue(r: Random, maxString: number): Json {
  switch (r.int(12)) {
    case 0:
      return null;
    case 1:
      return r.chance(0.5);
    case 2:
      return r.pick([0, -1, 1.5, 1e308, -1e308, 2 ** 53 + 1, 4096, 100000]);
    case 3:
      return r.pick([
        '',
        'x',
        'user',
        'assistant',
        'system',
        'tool',
        'gantry/local-chat',
        'float',
        'base64',
        '\u0000',
        '\ud800',
      ]);
    case 4: {
      // A long string: words (cheap to tokenize) or one run without spaces.
      const length = Math.min(maxString, 1 + r.int(maxString));
      return r.chance(0.5)
        ? 'lorem ipsum '.repeat(Math.ceil(length / 12)).slice(0, length)
        : 'x'.repeat(length);
    }
    case 5:
      return [];
    case 6:
      return {};
    case 7:
      return Array.from({ length: 1 + r.int(5) }, () => randomValue(r, Math.min(maxString, 64)));
    case 8:
      return { role: r.pick(['user', 'x']), content: r.chance(0.5) ? 'hi' : [{ type: 'text', text: 'hi' }] };
    case 9: {
      // A marker, replaced in the text: JSON.stringify itself overflows on thousands of levels.
      return `@@deep:${r.pick([10, 127, 128, 300, 5_000])}@@`;
    }
    case 10:
      return Array.from({ length: r.pick([100, 2_048, 10_000]) }, (_, i) => i);
    default:
      return { type: r.pick(['text', 'image_url', 'x']), text: 'hi' };
  }
}

// ---------------------------------------------------------------------------------------------------
// Sending and judging

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
  ms: number;
  timedOut: boolean;
  error: string | undefined;
}

function send(port: number, request: FuzzRequest): Promise<Answer> {
  return new Promise((resolve) => {
    const startedAt = Date.now();
    const chunks: Buffer[] = [];
    let settled = false;
    let error: string | undefined;
    const socket = connect(port, '127.0.0.1');
    const done = (timedOut: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({
        ...parseAnswer(Buffer.concat(chunks), request.method),
        ms: Date.now() - startedAt,
        timedOut,
        error,
      });
    };
    const timer = setTimeout(() => done(true), ANSWER_WITHIN_MS);
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (isComplete(Buffer.concat(chunks), request.method)) done(false);
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      error = err.code ?? err.message;
      done(false);
    });
    socket.on('close', () => done(false));
    const head = `${request.method} ${request.target} HTTP/1.1\r\n${request.headers.map(([n, v]) => `${n}: ${v}`).join('\r\n')}\r\n\r\n`;
    // The socket stays open for writing: a client that half-closes is taken by Node for one that left.
    socket.write(Buffer.concat([Buffer.from(head, 'latin1'), request.body]));
  });
}

function parseAnswer(raw: Buffer, method: string): Pick<Answer, 'status' | 'headers' | 'body'> {
  const end = raw.indexOf('\r\n\r\n');
  if (end === -1) return { status: 0, headers: {}, body: raw.toString('latin1').slice(0, 2000) };
  const lines = raw.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = raw.subarray(end + 4);
  if (method === 'HEAD' || status === 204 || status === 304) body = Buffer.alloc(0);
  else if (headers['transfer-encoding'] === 'chunked') body = dechunk(body);
  else if (headers['content-length'] !== undefined)
    body = body.subarray(0, Number(headers['content-length']));
  return { status, headers, body: body.toString('utf8') };
}

/** True once `raw` holds a whole answer (the server may keep the connection open after it). */
function isComplete(raw: Buffer, method: string): boolean {
  const end = raw.indexOf('\r\n\r\n');
  if (end === -1) return false;
  const head = raw.subarray(0, end).toString('latin1').toLowerCase();
  const status = Number(head.slice(9, 12));
  if (method === 'HEAD' || status === 204 || status === 304) return true;
  const length = /\r\ncontent-length: *(\d+)/.exec(head)?.[1];
  if (length !== undefined) return raw.length - end - 4 >= Number(length);
  if (/\r\ntransfer-encoding: *chunked/.test(head))
    return raw.subarray(raw.length - 5).toString('latin1') === '0\r\n\r\n';
  return false;
}

function dechunk(data: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  while (at < data.length) {
    const lineEnd = data.indexOf('\r\n', at);
    if (lineEnd === -1) break;
    const size = Number.parseInt(data.subarray(at, lineEnd).toString('latin1'), 16);
    if (!(size > 0)) break;
    parts.push(data.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

/** Why an answer is wrong, or undefined. */
function judge(request: FuzzRequest, answer: Answer): string | undefined {
  if (answer.timedOut) return `no complete answer within ${ANSWER_WITHIN_MS / 1000} s`;
  if (answer.status === 0) {
    // A server that answers a body it refuses (no key, too large) and closes before reading it makes the
    // kernel reset the connection, and a reset can drop the answer before the client reads it. Not an
    // answer of Gantry's: allowed for bodies too big to sit in the socket buffers.
    const reset = answer.error === 'EPIPE' || answer.error === 'ECONNRESET';
    if (reset && request.body.length > 1024 * 1024) return undefined;
    return `no HTTP answer (connection ${answer.error ?? 'closed'})`;
  }
  if (answer.status >= 500) return `status ${answer.status}`;
  if (answer.status < 400) {
    const type = answer.headers['content-type'] ?? '';
    if (type.startsWith('application/json') && answer.body !== '') {
      try {
        JSON.parse(answer.body);
      } catch {
        return 'a JSON answer that does not parse';
      }
    }
    return undefined;
  }
  if (request.method === 'HEAD') return undefined;
  let body: unknown;
  try {
    body = JSON.parse(answer.body);
  } catch {
    return 'an error that is not JSON';
  }
  return envelopeProblem(body, answer.status);
}

/** What is wrong with an error body against the two envelopes of src/errors.ts, or undefined. */
export function envelopeProblem(body: unknown, status: number): string | undefined {
  if (typeof body !== 'object' || body === null) return 'an error that is not an object';
  const b = body as Record<string, unknown>;
  const error = b.error as Record<string, unknown> | undefined;
  if (typeof error !== 'object' || error === null) return 'no error object';
  const id = error.error_id;
  if (typeof id !== 'string' || !(id in ERROR_CATALOG))
    return `error_id ${String(id)} is not in the catalogue`;
  const entry = ERROR_CATALOG[id as ErrorId];
  if (error.http_status !== status) return `http_status ${String(error.http_status)} on a ${status} answer`;
  if (entry.status !== status) return `${id} is ${entry.status} in the catalogue, answered ${status}`;
  if (typeof error.message !== 'string' || error.message === '') return 'no message';
  const details = error.details;
  if (typeof details !== 'string' && (typeof details !== 'object' || details === null)) return 'bad details';
  if ('status' in b) {
    // REST envelope.
    if (b.status !== false || typeof b.response !== 'string') return 'REST envelope without status/response';
    const extra = Object.keys(error).filter(
      (k) => !['http_status', 'message', 'details', 'error_id', 'type', 'code'].includes(k),
    );
    if (extra.length > 0) return `REST envelope with ${extra.join(', ')}`;
  }
  // Both envelopes carry OpenAI's type and code.
  if (error.type !== entry.type) return `type ${String(error.type)}, the catalogue says ${entry.type}`;
  if (error.code !== id.toLowerCase()) return `code ${String(error.code)}`;
  if ('status' in b) return undefined;
  if (!(error.param === null || typeof error.param === 'string')) return 'param neither null nor a string';
  return undefined;
}

function describeRequest(request: FuzzRequest): string {
  const head = `${request.method} ${truncate(request.target, 300)}\n${request.headers.map(([n, v]) => `  ${n}: ${truncate(v, 120)}`).join('\n')}`;
  const body =
    request.body.length === 0
      ? '(no body)'
      : `body (${request.body.length} bytes): ${truncate(request.body.toString('utf8'), 600)}`;
  return `${head}\n  ${body}`;
}

function describeAnswer(answer: Answer): string {
  return `${answer.status} after ${answer.ms} ms ${JSON.stringify(answer.headers)}\n  ${truncate(answer.body, 800)}`;
}

function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length} characters)`;
}

// ---------------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      seed: { type: 'string' },
      count: { type: 'string', default: '5000' },
      seconds: { type: 'string', default: '120' },
      concurrency: { type: 'string', default: '4' },
      'max-string': { type: 'string', default: String(256 * 1024) },
      only: { type: 'string' },
    },
  });
  const seed = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(values.seed);
  const options: FuzzOptions = {
    seed,
    count: Number(values.count),
    seconds: Number(values.seconds),
    concurrency: Number(values.concurrency),
    maxString: Number(values['max-string']),
    ...(values.only === undefined ? {} : { only: Number(values.only) }),
    log: (line) => console.log(line),
  };
  const result = await runFuzz(options);
  console.log(
    `fuzz: ${result.sent} requests in ${(result.elapsedMs / 1000).toFixed(1)} s over ${result.routes} routes, seed ${seed}; statuses ${JSON.stringify(result.byStatus)}`,
  );
  for (const failure of result.failures.slice(0, 20)) {
    console.log(`\nFAIL #${failure.index}: ${failure.problem}\n${failure.request}\n-> ${failure.answer}`);
    console.log(
      `  again: npm run fuzz -- --seed ${seed} --only ${failure.index} --max-string ${options.maxString}`,
    );
  }
  if (result.failures.length > 0) {
    console.log(`\n${result.failures.length} failing requests`);
    process.exit(1);
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(err instanceof Error ? err.message : err);
      process.exit(1);
    },
  );
}
