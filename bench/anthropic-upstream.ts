/**
 * Bench child: a fake Anthropic Messages API that answers at once, in Anthropic's wire format (the
 * shapes of test/helpers/fake-anthropic.ts, which follows Anthropic's docs "Messages" and "Streaming
 * Messages").
 *
 *   POST /v1/messages            a Message: one text block, or with `tools` in the request a text block
 *                                and a tool_use block (stop_reason tool_use)
 *   POST /v1/messages stream     message_start, content_block_start, ping, N content_block_delta events,
 *                                content_block_stop, message_delta, message_stop; with `tools`, the N
 *                                deltas are text_delta pieces then input_json_delta pieces of a tool_use
 *                                block (N/4 of them, at least 1)
 *   GET  /bench/stats            {connections, requests} so far
 *
 * The model in the answer is the one the request named (read with a regex, like bench/upstream.ts).
 * Listens on 127.0.0.1, random port, reports it over IPC; exits when the parent goes away.
 *
 * usage: node --import tsx bench/anthropic-upstream.ts [--chunks N]
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseArgs } from 'node:util';
import { fakeUpstreamServer, serveChild } from './lib/child-server.js';

const { values } = parseArgs({ options: { chunks: { type: 'string', default: '32' } } });
const CHUNKS = Math.max(2, Math.min(10_000, Number(values.chunks) || 32));
const REPLY =
  'Packets queue at the gate, one hand spreads them evenly, no server stands alone. ' +
  'Health checks hum softly, the slow node steps aside, traffic flows like rain.';
const WORDS = REPLY.match(/\s*\S+/g) ?? [REPLY];
const TOOL_NAME = 'get_weather';
const TOOL_INPUT = '{"location": "San Francisco, CA", "unit": "celsius", "days": 3}';
const MODEL_RE = /"model"\s*:\s*"((?:[^"\\]|\\.)*)"/;

/** Text pieces and tool-input pieces of a streamed answer: CHUNKS deltas in all. */
function plan(withTool: boolean): { text: string[]; json: string[] } {
  const jsonCount = withTool ? Math.max(1, Math.floor(CHUNKS / 4)) : 0;
  const text = Array.from({ length: CHUNKS - jsonCount }, (_, i) => WORDS[i % WORDS.length] as string);
  const size = Math.ceil(TOOL_INPUT.length / Math.max(1, jsonCount));
  const json = Array.from({ length: jsonCount }, (_, i) => TOOL_INPUT.slice(i * size, (i + 1) * size));
  return { text, json };
}
const PLAIN = plan(false);
const WITH_TOOL = plan(true);

let counter = 0;

function nextId(prefix: string): string {
  counter = (counter + 1) % 1_000_000_000;
  return `${prefix}${counter.toString(36).padStart(8, '0')}Xk3nT2mYpLrQ7vKf`;
}

function message(model: string, withTool: boolean): string {
  const text = JSON.stringify(REPLY);
  const tool = withTool
    ? `,{"type":"tool_use","id":"${nextId('toolu_01')}","name":"${TOOL_NAME}","input":${TOOL_INPUT}}`
    : '';
  return (
    `{"id":"${nextId('msg_01')}","type":"message","role":"assistant","model":"${model}",` +
    `"content":[{"type":"text","text":${text}}${tool}],` +
    `"stop_reason":"${withTool ? 'tool_use' : 'end_turn'}","stop_sequence":null,` +
    `"usage":{"input_tokens":28,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":${withTool ? 52 : 31}}}`
  );
}

function frames(model: string, withTool: boolean): string[] {
  const { text, json } = withTool ? WITH_TOOL : PLAIN;
  const out: string[] = [];
  const emit = (type: string, rest: string) =>
    out.push(`event: ${type}\ndata: {"type":"${type}"${rest}}\n\n`);
  emit(
    'message_start',
    `,"message":{"id":"${nextId('msg_01')}","type":"message","role":"assistant","model":"${model}",` +
      '"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":28,' +
      '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}',
  );
  emit('content_block_start', ',"index":0,"content_block":{"type":"text","text":""}');
  emit('ping', '');
  for (const piece of text) {
    emit('content_block_delta', `,"index":0,"delta":{"type":"text_delta","text":${JSON.stringify(piece)}}`);
  }
  emit('content_block_stop', ',"index":0');
  if (withTool) {
    emit(
      'content_block_start',
      `,"index":1,"content_block":{"type":"tool_use","id":"${nextId('toolu_01')}","name":"${TOOL_NAME}","input":{}}`,
    );
    for (const piece of json) {
      emit(
        'content_block_delta',
        `,"index":1,"delta":{"type":"input_json_delta","partial_json":${JSON.stringify(piece)}}`,
      );
    }
    emit('content_block_stop', ',"index":1');
  }
  emit(
    'message_delta',
    `,"delta":{"stop_reason":"${withTool ? 'tool_use' : 'end_turn'}","stop_sequence":null},` +
      `"usage":{"output_tokens":${CHUNKS}}`,
  );
  emit('message_stop', '');
  return out;
}

function sendError(res: ServerResponse, status: number, type: string, message: string): void {
  const body = JSON.stringify({ type: 'error', error: { type, message }, request_id: nextId('req_') });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function answer(req: IncomingMessage, res: ServerResponse, body: string): void {
  if (req.method !== 'POST' || req.url !== '/v1/messages') {
    sendError(res, 404, 'not_found_error', 'Not found');
    return;
  }
  if (req.headers['anthropic-version'] === undefined) {
    sendError(res, 400, 'invalid_request_error', 'anthropic-version: header is required');
    return;
  }
  const model = MODEL_RE.exec(body)?.[1] ?? 'claude-bench';
  const withTool = body.includes('"tools":[');
  const requestId = `req_${counter.toString(16)}`;
  if (body.includes('"stream":true')) {
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'request-id': requestId,
    });
    // One write per event, as bench/upstream.ts does (and as a real upstream sends them as generated).
    for (const frame of frames(model, withTool)) res.write(frame);
    res.end();
    return;
  }
  const json = message(model, withTool);
  res.writeHead(200, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(json),
    'request-id': requestId,
  });
  res.end(json);
}

serveChild(fakeUpstreamServer(answer));
