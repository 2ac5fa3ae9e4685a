import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatSse } from '../../providers/sse.js';
import type { JsonObject } from '../../providers/types.js';
import {
  chatCompletionToResponse,
  chatStreamToResponseEvents,
  type ResponseMeta,
  responsesToChat,
  validateResponsesRequest,
} from '../../src/responses/bridge.js';
import { chatChunks, chatUsage, iterate, RESPONSE_ID } from './fixtures.js';

/**
 * A stand-in for the route: validates what the official SDK sends, bridges it, and answers from canned
 * chat output, so the SDK's own parser and accumulator judge the events.
 */
let server: Server;
let baseURL: string;
const chatBodies: JsonObject[] = [];
let finishReason = 'stop';

async function readJson(req: IncomingMessage): Promise<unknown> {
  let text = '';
  for await (const chunk of req) text += String(chunk);
  return JSON.parse(text);
}

beforeAll(async () => {
  server = createServer((req, res) => {
    void (async () => {
      const request = validateResponsesRequest(await readJson(req));
      const { chatBody } = responsesToChat(request, []);
      chatBodies.push(chatBody);
      const meta: ResponseMeta = {
        id: RESPONSE_ID,
        model: String(request.model),
        createdAt: 1_750_000_000,
        request,
      };
      if (request.stream !== true) {
        const completion = {
          id: 'chatcmpl-1',
          object: 'chat.completion',
          created: 1_750_000_000,
          model: 'llama',
          choices: [
            { index: 0, message: { role: 'assistant', content: 'Hi there!' }, finish_reason: finishReason },
          ],
          usage: chatUsage,
        };
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(chatCompletionToResponse(completion, meta)));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const chunks = iterate(chatChunks(['Hi', ' there', '!'], finishReason));
      for await (const event of chatStreamToResponseEvents(chunks, meta, () => {}))
        res.write(formatSse(event));
      res.end();
    })().catch((err: unknown) => {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: String(err), type: 'invalid_request_error' } }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseURL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe('the official openai SDK', () => {
  const client = () => new OpenAI({ baseURL, apiKey: 'x', maxRetries: 0 });

  it('consumes the bridged stream with responses.stream()', async () => {
    finishReason = 'stop';
    const stream = client().responses.stream({
      model: 'gantry/llama',
      input: 'Say hi',
      instructions: 'Be friendly.',
      max_output_tokens: 50,
    });
    const deltas: string[] = [];
    stream.on('response.output_text.delta', (e) => deltas.push(e.delta));
    const final = await stream.finalResponse();

    expect(final.output_text).toBe('Hi there!');
    expect(deltas).toEqual(['Hi', ' there', '!']);
    expect(final.id).toBe(RESPONSE_ID);
    expect(final.status).toBe('completed');
    expect(final.usage?.total_tokens).toBe(17);
    expect(chatBodies.at(-1)).toMatchObject({
      stream: true,
      max_tokens: 50,
      messages: [
        { role: 'system', content: 'Be friendly.' },
        { role: 'user', content: 'Say hi' },
      ],
    });
  });

  it('sees an incomplete stream as incomplete', async () => {
    finishReason = 'length';
    const final = await client()
      .responses.stream({ model: 'gantry/llama', input: [{ role: 'user', content: 'Say hi' }] })
      .finalResponse();
    expect(final.status).toBe('incomplete');
    expect(final.incomplete_details?.reason).toBe('max_output_tokens');
    expect(final.output_text).toBe('Hi there!');
  });

  it('reads a non-streamed bridged Response with responses.create()', async () => {
    finishReason = 'stop';
    const response = await client().responses.create({ model: 'gantry/llama', input: 'Say hi' });
    expect(response.output_text).toBe('Hi there!');
    expect(response.status).toBe('completed');
  });
});
