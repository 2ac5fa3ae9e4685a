/**
 * Non-streamed answers of an OpenAI-compatible upstream reach the client as the upstream wrote them
 * (whitespace, key order, fields Gantry does not know) when nothing needs changing, through the fast path
 * and through fastify alike; a renamed model is the one case that re-serialises the body. Requests go the
 * other way the same: the fast path sends the client's own JSON text upstream when nothing in it changes.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { ledgerRecords } from '../helpers/usage.js';

/** Pretty-printed, with a field of the upstream's own: what a llama.cpp-style server might send. */
function completionText(model: string): string {
  return JSON.stringify(
    {
      id: 'chatcmpl-pass-1',
      object: 'chat.completion',
      created: 1_700_000_000,
      model,
      system_fingerprint: 'fp_pass',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'as written', refusal: null },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: { prompt_tokens: 11, completion_tokens: 3, total_tokens: 14 },
      timings: { prompt_ms: 1.5, predicted_ms: 2.25 },
    },
    null,
    2,
  );
}

function embeddingText(model: string): string {
  return `{"object":"list","model":${JSON.stringify(model)},"data":[{"object":"embedding","index":0,"embedding":[0.1,-0.25,1e-7]}],"usage":{"prompt_tokens":2,"total_tokens":2}}`;
}

let upstream: Server;
let upstreamUrl: string;
const sent: string[] = [];
/** The request bodies the upstream received, as bytes. */
const received: string[] = [];

beforeAll(async () => {
  upstream = createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk: Buffer) => {
      raw += chunk.toString('utf8');
    });
    req.on('end', () => {
      received.push(raw);
      const model = (JSON.parse(raw) as { model: string }).model;
      const text = req.url?.endsWith('/embeddings') ? embeddingText(model) : completionText(model);
      sent.push(text);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(text);
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`;
});

afterAll(async () => {
  await new Promise((resolve) => upstream.close(resolve));
});

const yaml = () => `
providers:
  up: { kind: openai, base_url: ${upstreamUrl} }
tiers:
  default: {}
models:
  - namespace: acme/chat
    name: Chat
    type: text
    apis: [chat, embeddings]
    routes: [{ provider: up, model: acme/chat }]
  - namespace: acme/renamed
    name: Renamed
    type: text
    apis: [chat]
    routes: [{ provider: up, model: internal-7b }]
  - namespace: acme/defaults
    name: With defaults
    type: text
    apis: [chat]
    defaults: { temperature: 0.5 }
    routes: [{ provider: up, model: acme/defaults }]
`;

for (const fastPath of [true, false]) {
  describe(fastPath ? 'through the fast path' : 'through fastify', () => {
    let gantry: TestGantry;

    beforeAll(async () => {
      gantry = await startGantry(yaml(), {}, { fastPath });
    });

    afterAll(async () => {
      await gantry?.close();
    });

    async function post(path: string, body: object) {
      const res = await request(`${gantry.baseURL}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${gantry.key}` },
        body: JSON.stringify(body),
      });
      return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
    }

    it('sends a chat completion byte for byte as the upstream wrote it, and meters its usage', async () => {
      const res = await post('/chat/completions', {
        model: 'acme/chat',
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
      expect(res.text).toBe(sent.at(-1));
      expect(res.text).toContain('\n  "timings": {');
      expect(Number(res.headers['content-length'])).toBe(Buffer.byteLength(res.text));

      const client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
      const completion = await client.chat.completions.create({
        model: 'acme/chat',
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(completion.choices[0]?.message.content).toBe('as written');
      const account = gantry.store.getAccountByName('test');
      if (!account) throw new Error('no test account');
      const records = await ledgerRecords(gantry, account.id, 2);
      expect(records.slice(-2).map((r) => [r.input_tokens, r.output_tokens])).toEqual([
        [11, 3],
        [11, 3],
      ]);
    });

    it('sends embeddings as written', async () => {
      const res = await post('/embeddings', { model: 'acme/chat', input: 'hi' });
      expect(res.status).toBe(200);
      expect(res.text).toBe(sent.at(-1));
    });

    // Spaced, keys in the client's order, a field Gantry does not know: what a hand-written client sends.
    const clientText = (model: string) =>
      `{ "messages": [ { "role": "user", "content": "hi" } ],\n  "x_vendor": { "a": 1 }, "model": "${model}" }`;

    async function postText(text: string) {
      const res = await request(`${gantry.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${gantry.key}` },
        body: text,
      });
      return { status: res.statusCode, text: await res.body.text() };
    }

    it(
      fastPath
        ? 'sends the client’s request text upstream as it is when nothing in it changes'
        : 'sends the request upstream re-serialised (the same JSON value)',
      async () => {
        const text = clientText('acme/chat');
        const res = await postText(text);
        expect(res.status).toBe(200);
        const upstreamGot = received.at(-1) as string;
        expect(JSON.parse(upstreamGot)).toEqual(JSON.parse(text));
        if (fastPath) expect(upstreamGot).toBe(text);
        else expect(upstreamGot).toBe(JSON.stringify(JSON.parse(text)));
      },
    );

    it('re-serialises a request whose model is renamed or that gains defaults', async () => {
      expect((await postText(clientText('acme/renamed'))).status).toBe(200);
      expect(JSON.parse(received.at(-1) as string)).toEqual({
        ...JSON.parse(clientText('x')),
        model: 'internal-7b',
      });

      expect((await postText(clientText('acme/defaults'))).status).toBe(200);
      expect(JSON.parse(received.at(-1) as string)).toEqual({
        ...JSON.parse(clientText('acme/defaults')),
        temperature: 0.5,
      });
    });

    it('re-serialises only to rename the model: the client sees the name it asked for', async () => {
      const res = await post('/chat/completions', {
        model: 'acme/renamed',
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(res.status).toBe(200);
      expect(sent.at(-1)).toContain('"model": "internal-7b"');
      const body = JSON.parse(res.text) as { model: string; timings: unknown };
      expect(body.model).toBe('acme/renamed');
      expect(body.timings).toEqual({ prompt_ms: 1.5, predicted_ms: 2.25 });
      expect(res.text).not.toContain('\n');
    });
  });
}
