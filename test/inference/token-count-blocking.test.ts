/**
 * Counting input tokens runs on the event loop of the request path whenever an input-token ceiling (or
 * a price) reads it. A long run of characters without a space used to be byte-pair encoded as one
 * piece, in time quadratic in its length: 100,000 characters froze every tenant's requests for 9-29 s.
 * Real Gantry (in this process, so a blocked loop delays the concurrent request too), a real upstream.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';

let fake: FakeOpenAI;
let gantry: TestGantry;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  gantry = await startGantry(`
providers:
  up: { kind: openai, base_url: ${fake.url} }
tiers:
  default:
    window_seconds: 60
    model: { input_tokens: 10000000 }
models:
  - { namespace: acme/limited, name: Limited, type: text, routes: [{ provider: up, model: fake-model }] }
`);
});
afterAll(async () => {
  await gantry?.close();
  await fake?.close();
});

function post(path: string, body: unknown): Promise<Response> {
  return fetch(`${gantry.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

describe('a long run without spaces', () => {
  it('is counted without blocking a concurrent request for more than a second', async () => {
    const run = 'x'.repeat(50_000) + 'q'.repeat(50_000);
    const big = post('/chat/completions', {
      model: 'acme/limited',
      messages: [{ role: 'user', content: run }],
    });
    let done = false;
    const finished = big.then((res) => {
      done = true;
      return res;
    });
    // Small requests one after another for as long as the big one runs: the slowest shows the block.
    let slowest = 0;
    let served = 0;
    while (!done) {
      const start = performance.now();
      const res = await fetch(`${gantry.baseURL}/models`, {
        headers: { authorization: `Bearer ${gantry.key}` },
      });
      await res.arrayBuffer();
      expect(res.status).toBe(200);
      slowest = Math.max(slowest, performance.now() - start);
      served++;
    }
    const res = await finished;
    expect(res.status).toBe(200);
    const answer = (await res.json()) as { choices: Array<{ message: { content: string } }> };
    expect(answer.choices[0]?.message.content).toContain('xxxx');
    expect(served).toBeGreaterThan(0);
    expect(slowest).toBeLessThan(1_000);
  });
});
