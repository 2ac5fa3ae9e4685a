import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FastPath } from '../../src/fast-path/fast-path.js';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';

/**
 * The node:http fast path (src/fast-path) must answer exactly as fastify does for the inference routes:
 * the same status, headers and body for successes and every error, and it must leave to fastify every
 * request it does not take. Two Gantrys from one config, one without the fast path, get the same requests.
 */

const CONFIG = LOCAL_CONFIG.replace('providers:', 'server: { body_limit_bytes: 2048 }\nproviders:');

let fast: TestGantry;
let plain: TestGantry;
const taken: boolean[] = [];

beforeAll(async () => {
  const take = FastPath.prototype.take;
  vi.spyOn(FastPath.prototype, 'take').mockImplementation(function (this: FastPath, req, res) {
    const result = take.call(this, req, res);
    taken.push(result);
    return result;
  });
  fast = await startGantry(CONFIG);
  plain = await startGantry(CONFIG, {}, { fastPath: false });
});
afterAll(async () => {
  vi.restoreAllMocks();
  await Promise.all([fast?.close(), plain?.close()]);
});

interface RawAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

interface RawCall {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  /** Sent with Content-Length, or in chunks (Transfer-Encoding: chunked) when `chunked`. */
  body?: string;
  chunked?: boolean;
  /** Which key to send: the target's own (default), none, or this literal value. */
  key?: string | null;
}

function send(target: TestGantry, call: RawCall): Promise<RawAnswer> {
  const key = call.key === undefined ? target.key : call.key;
  const headers: Record<string, string> = {
    ...(key === null ? {} : { authorization: `Bearer ${key}` }),
    ...(call.body === undefined || call.chunked
      ? {}
      : { 'content-length': String(Buffer.byteLength(call.body)) }),
    ...call.headers,
  };
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${target.origin}${call.path}`,
      { method: call.method ?? 'POST', headers, agent: false },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (call.body !== undefined && call.chunked) {
      const half = Math.floor(call.body.length / 2);
      req.write(call.body.slice(0, half));
      req.end(call.body.slice(half));
    } else {
      req.end(call.body);
    }
  });
}

/**
 * Ids, timestamps, the per-connection Date header and Gantry's own time (x-gantry-overhead-ms, present
 * on both, its value measured) differ between two answers by nature.
 */
function normalise(answer: RawAnswer): RawAnswer {
  const { date: _date, ...headers } = answer.headers;
  if (headers['x-gantry-overhead-ms'] !== undefined) headers['x-gantry-overhead-ms'] = '<ms>';
  const text = answer.text
    .replace(/"(id|response_id|previous_response_id)":"[^"]*"/g, '"$1":"<id>"')
    .replace(/"(created|created_at|completed_at)":\d+/g, '"$1":0');
  return { status: answer.status, headers, text };
}

async function both(call: RawCall): Promise<{ fast: RawAnswer; plain: RawAnswer; taken: boolean }> {
  taken.length = 0;
  const a = await send(fast, call);
  const wasTaken = taken.includes(true);
  const b = await send(plain, call);
  return { fast: normalise(a), plain: normalise(b), taken: wasTaken };
}

const JSON_TYPE = { 'content-type': 'application/json' };
const chat = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'gantry/local-chat', messages: [{ role: 'user', content: 'hello' }], ...extra });

describe('the fast path answers as fastify does', () => {
  const served: Array<[string, RawCall]> = [
    ['a chat completion', { path: '/v1/chat/completions', headers: JSON_TYPE, body: chat() }],
    [
      'a chat completion sent with a charset',
      {
        path: '/v1/chat/completions',
        headers: { 'content-type': 'application/json; charset=utf-8' },
        body: chat(),
      },
    ],
    [
      'embeddings',
      { path: '/v1/embeddings', headers: JSON_TYPE, body: '{"model":"gantry/local-embed","input":"hi"}' },
    ],
    [
      'a response (bridged)',
      { path: '/v1/responses', headers: JSON_TYPE, body: '{"model":"gantry/local-chat","input":"hi"}' },
    ],
    ['a wrong key', { path: '/v1/chat/completions', headers: JSON_TYPE, body: chat(), key: 'gty_nope' }],
    ['malformed JSON', { path: '/v1/chat/completions', headers: JSON_TYPE, body: '{"model": "x", ' }],
    ['a body that is not an object', { path: '/v1/embeddings', headers: JSON_TYPE, body: '[1, 2]' }],
    [
      'a prototype-poisoning body',
      { path: '/v1/chat/completions', headers: JSON_TYPE, body: '{"__proto__": {"x": 1}}' },
    ],
    [
      'a prototype-poisoning key spelt with escapes',
      { path: '/v1/chat/completions', headers: JSON_TYPE, body: '{"\\u005f_proto__": {"x": 1}}' },
    ],
    [
      'a constructor.prototype body',
      {
        path: '/v1/chat/completions',
        headers: JSON_TYPE,
        body: '{"model":"gantry/local-chat","constructor":{"prototype":{"x":1}},"messages":[]}',
      },
    ],
    [
      'a body with harmless escapes',
      {
        path: '/v1/chat/completions',
        headers: JSON_TYPE,
        body: '{"model":"gantry/local-chat","messages":[{"role":"user","content":"caf\\u00e9 \\ud83d\\ude00"}]}',
      },
    ],
    [
      'a body with a byte order mark',
      { path: '/v1/chat/completions', headers: JSON_TYPE, body: `\ufeff${chat()}` },
    ],
    [
      'an invalid parameter',
      { path: '/v1/chat/completions', headers: JSON_TYPE, body: chat({ temperature: 9 }) },
    ],
    [
      'an unknown model',
      { path: '/v1/chat/completions', headers: JSON_TYPE, body: chat({ model: 'nobody/nothing' }) },
    ],
    [
      'a model that does not serve the API',
      { path: '/v1/embeddings', headers: JSON_TYPE, body: '{"model":"gantry/local-chat","input":"hi"}' },
    ],
    [
      'a stream, with the client’s request id',
      {
        path: '/v1/chat/completions',
        headers: { ...JSON_TYPE, 'x-request-id': 'req-client-1' },
        body: chat({ stream: true }),
      },
    ],
  ];
  for (const [what, call] of served) {
    it(`${what}: served by the fast path, same answer`, async () => {
      const { fast: a, plain: b, taken: wasTaken } = await both(call);
      expect(wasTaken).toBe(true);
      expect(a).toEqual(b);
    });
  }

  const deferred: Array<[string, RawCall]> = [
    ['an empty body', { path: '/v1/chat/completions', headers: JSON_TYPE, body: '' }],
    ['no body and no Content-Type', { path: '/v1/chat/completions' }],
    [
      'a wrong Content-Type',
      { path: '/v1/chat/completions', headers: { 'content-type': 'text/plain' }, body: 'hi' },
    ],
    [
      'an unusual JSON Content-Type',
      {
        path: '/v1/chat/completions',
        headers: { 'content-type': 'application/json; charset=latin1' },
        body: chat(),
      },
    ],
    [
      'an oversized body',
      { path: '/v1/chat/completions', headers: JSON_TYPE, body: chat({ user: 'x'.repeat(4000) }) },
    ],
    [
      'an oversized body without a key',
      { path: '/v1/chat/completions', headers: JSON_TYPE, body: chat({ user: 'x'.repeat(4000) }), key: null },
    ],
    // No key at all: fastify answers (a console session's cookie is read there, README "Console").
    ['no key', { path: '/v1/chat/completions', headers: JSON_TYPE, body: chat(), key: null }],
    ['a chunked body', { path: '/v1/chat/completions', headers: JSON_TYPE, body: chat(), chunked: true }],
    ['a query string', { path: '/v1/chat/completions?x=1', headers: JSON_TYPE, body: chat() }],
    ['another method', { method: 'PUT', path: '/v1/chat/completions', headers: JSON_TYPE, body: chat() }],
    ['another route', { path: '/v1/models', headers: JSON_TYPE, body: chat() }],
  ];
  for (const [what, call] of deferred) {
    it(`${what}: left to fastify, same answer`, async () => {
      const { fast: a, plain: b, taken: wasTaken } = await both(call);
      expect(wasTaken).toBe(false);
      expect(a).toEqual(b);
    });
  }

  it('counts fast-path requests under their route in the metrics', async () => {
    await send(fast, { path: '/v1/chat/completions', headers: JSON_TYPE, body: chat() });
    const metrics = await fetch(`${fast.origin}/metrics`).then((r) => r.text());
    expect(metrics).toMatch(
      /gantry_http_requests_total\{route="\/v1\/chat\/completions",method="POST",status="200",model="gantry\/local-chat",provider="local"\} [1-9]/,
    );
  });
});
