/**
 * Bench child 1: a fake OpenAI-compatible upstream that answers at once.
 *
 *   POST /v1/chat/completions            chat.completion JSON (the shape OpenAI sends today)
 *   POST /v1/chat/completions stream     role chunk, N content chunks, finish chunk, [usage chunk], [DONE]
 *   GET  /bench/stats                    {connections, requests} so far: shows connection churn
 *
 * The model in the answer is the one the request named (read with a regex, not JSON.parse, so the fake
 * costs the same whatever sits in front of it). Listens on 127.0.0.1, random port, and reports it to the
 * parent over IPC; exits when the parent goes away.
 *
 * usage: node --import tsx bench/upstream.ts [--chunks N] [--gap-ms MS]
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseArgs } from 'node:util';
import { fakeUpstreamServer, serveChild } from './lib/child-server.js';

const { values } = parseArgs({
  options: {
    chunks: { type: 'string', default: '32' },
    'gap-ms': { type: 'string', default: '0' },
  },
});
const CHUNKS = Math.max(1, Math.min(10_000, Number(values.chunks) || 32));
const GAP_MS = Math.max(0, Number(values['gap-ms']) || 0);

const FINGERPRINT = 'fp_b376dfbbd5';
const REPLY =
  'Packets queue at the gate, one hand spreads them evenly, no server stands alone. ' +
  'Health checks hum softly, the slow node steps aside, traffic flows like rain.';
const WORDS = REPLY.match(/\s*\S+/g) ?? [REPLY];
/** One piece per chunk, cycling through the reply's words (one word is about one token). */
const PIECES = Array.from({ length: CHUNKS }, (_, i) => WORDS[i % WORDS.length] as string);
const MODEL_RE = /"model"\s*:\s*"((?:[^"\\]|\\.)*)"/;

let counter = 0;

function nextId(): string {
  counter = (counter + 1) % 1_000_000_000;
  return `chatcmpl-Bx${counter.toString(36).padStart(8, '0')}Q7vKf3nT2mYpLr`;
}

function modelOf(body: string): string {
  return MODEL_RE.exec(body)?.[1] ?? 'gpt-4o-mini-2024-07-18';
}

function completion(model: string): string {
  const text = JSON.stringify(REPLY);
  return (
    `{"id":"${nextId()}","object":"chat.completion","created":${Math.floor(Date.now() / 1000)},` +
    `"model":"${model}","choices":[{"index":0,"message":{"role":"assistant","content":${text},` +
    '"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],' +
    '"usage":{"prompt_tokens":28,"completion_tokens":31,"total_tokens":59,' +
    '"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":' +
    '{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},' +
    `"service_tier":"default","system_fingerprint":"${FINGERPRINT}"}`
  );
}

/** The SSE frames of one streamed answer, in OpenAI's exact wire format. */
function frames(model: string, includeUsage: boolean): string[] {
  const head =
    `{"id":"${nextId()}","object":"chat.completion.chunk","created":${Math.floor(Date.now() / 1000)},` +
    `"model":"${model}","service_tier":"default","system_fingerprint":"${FINGERPRINT}","choices":`;
  const usage = includeUsage ? ',"usage":null' : '';
  const choice = (delta: string, finish: string) =>
    `data: ${head}[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}]${usage}}\n\n`;
  const out = [choice('{"role":"assistant","content":"","refusal":null}', 'null')];
  for (const piece of PIECES) out.push(choice(`{"content":${JSON.stringify(piece)}}`, 'null'));
  out.push(choice('{}', '"stop"'));
  if (includeUsage) {
    out.push(
      `data: ${head}[],"usage":{"prompt_tokens":28,"completion_tokens":${CHUNKS},` +
        `"total_tokens":${28 + CHUNKS},"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},` +
        '"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,' +
        '"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}\n\n',
    );
  }
  out.push('data: [DONE]\n\n');
  return out;
}

function sendError(res: ServerResponse, status: number, message: string): void {
  const body = JSON.stringify({
    error: { message, type: 'invalid_request_error', param: null, code: null },
  });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function stream(res: ServerResponse, parts: string[]): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    'x-request-id': `req_${counter.toString(16)}`,
    'openai-processing-ms': '1',
  });
  if (GAP_MS === 0) {
    for (const part of parts) res.write(part);
    res.end();
    return;
  }
  let i = 0;
  const next = () => {
    if (res.destroyed) return;
    res.write(parts[i++]);
    if (i >= parts.length) res.end();
    else setTimeout(next, GAP_MS);
  };
  next();
}

function answer(req: IncomingMessage, res: ServerResponse, body: string): void {
  if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
    sendError(res, 404, `Unknown request URL: ${req.method} ${req.url}`);
    return;
  }
  const model = modelOf(body);
  if (body.includes('"stream":true')) {
    stream(res, frames(model, body.includes('"include_usage":true')));
    return;
  }
  const json = completion(model);
  res.writeHead(200, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(json),
    'x-request-id': `req_${counter.toString(16)}`,
    'openai-processing-ms': '1',
  });
  res.end(json);
}

serveChild(fakeUpstreamServer(answer));
