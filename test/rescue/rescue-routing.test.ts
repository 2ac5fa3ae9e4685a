/**
 * Stream rescue under health-aware routing: the continuation is picked among the model's deployments
 * marked `continuation`, in the order the routing strategy gives, through their circuit breakers (an
 * open one gets no connection), each attempt's outcome feeds its deployment's health, the model's
 * first_token_ms bounds a continuation too, and the in-flight counts all come back to 0. Real Gantry,
 * real fake upstreams on 127.0.0.1, raw SSE checked against OpenAI's schemas.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { NORMAL } from '../../src/routing/breaker.js';
import type { Deployment } from '../../src/routing/health.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { until } from '../helpers/wait.js';

const FULL = 'The quick brown fox jumps over the lazy dog.';
const PIECES = ['The', ' quick', ' bro', 'wn fox', ' jumps', ' over', ' the lazy', ' dog.'];
const MESSAGES = [{ role: 'user', content: 'Say the pangram.' }];

let a: FakeOpenAI;
let v: FakeOpenAI;
let w: FakeOpenAI;
let gantry: TestGantry;

beforeAll(async () => {
  [a, v, w] = await Promise.all([startFakeOpenAI(), startFakeOpenAI(), startFakeOpenAI()]);
  const t = '{ connect_ms: 1000, first_byte_ms: 5000, idle_ms: 5000, total_ms: 10000 }';
  gantry = await startGantry(`
providers:
  a: { kind: openai, base_url: ${a.url}, timeouts: ${t} }
  v: { kind: openai, base_url: ${v.url}, timeouts: ${t} }
  w: { kind: openai, base_url: ${w.url}, timeouts: ${t} }
models:
  - namespace: h/skip
    name: A, continued on V or W
    type: text
    routes:
      - { provider: a, model: model-a }
      - { provider: v, model: model-v, continuation: true }
      - { provider: w, model: model-w, continuation: true }
    routing: { breaker: { consecutive_failures: 1, cooldown_seconds: 60 } }
  - namespace: h/fail
    name: A, continued on V or W
    type: text
    routes:
      - { provider: a, model: model-a }
      - { provider: v, model: model-v, continuation: true }
      - { provider: w, model: model-w, continuation: true }
    routing: { breaker: { consecutive_failures: 1, cooldown_seconds: 60 } }
  - namespace: h/weighted
    name: V (weight 0, a continuation only) listed before A
    type: text
    routes:
      - { provider: v, model: model-v, continuation: true, weight: 0 }
      - { provider: a, model: model-a, weight: 1 }
    routing: { strategy: weighted }
  - namespace: h/slow
    name: A, continued on a V that may be slow to answer
    type: text
    routes: [{ provider: a, model: model-a }, { provider: v, model: model-v, continuation: true }]
    routing: { first_token_ms: 300, breaker: { consecutive_failures: 1, cooldown_seconds: 60 } }
`);
});
afterAll(async () => {
  await gantry?.close();
  await Promise.all([a?.close(), v?.close(), w?.close()]);
});
beforeEach(() => {
  for (const fake of [a, v, w]) fake.reset();
});

function deployments(model: string): readonly Deployment[] {
  const routing = gantry.gantry.routing.of(model);
  if (!routing) throw new Error(`no routing for ${model}`);
  return routing.deployments;
}

function byProvider(model: string, provider: string): Deployment {
  const found = deployments(model).find((d) => d.provider === provider);
  if (!found) throw new Error(`no deployment ${provider} in ${model}`);
  return found;
}

/** The stream's event data, in order; every chunk is checked against OpenAI's schema. */
async function stream(model: string): Promise<{ data: string[]; text: string; ms: number }> {
  const started = performance.now();
  const res = await fetch(`${gantry.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: MESSAGES, stream: true }),
  });
  expect(res.status).toBe(200);
  const body = await res.text();
  const data = body
    .split('\n\n')
    .filter((frame) => frame.trim() !== '')
    .map((frame) => frame.replace(/^data: /, ''));
  let text = '';
  for (const d of data) {
    if (d === '[DONE]') continue;
    const chunk = JSON.parse(d) as { choices?: Array<{ delta?: { content?: string } }> };
    if (chunk.choices) {
      assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
      text += chunk.choices[0]?.delta?.content ?? '';
    }
  }
  return { data, text, ms: performance.now() - started };
}

async function allIdle(model: string): Promise<void> {
  await until(`every deployment of ${model} idle`, () => deployments(model).every((d) => d.inflight === 0));
}

describe('stream rescue obeys routing and breakers', () => {
  it('an open continuation deployment gets no connection; the next one continues; the break counts against A', async () => {
    const dv = byProvider('h/skip', 'v');
    const permit = dv.begin(Date.now());
    expect(permit).toBe(NORMAL);
    dv.failed(permit, Date.now());
    dv.end();
    expect(dv.breaker.state).toBe('open');
    w.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });

    const { data, text } = await stream('h/skip');
    expect(text).toBe(FULL);
    expect(data.at(-1)).toBe('[DONE]');
    expect(v.requests).toHaveLength(0);
    expect(w.requests).toHaveLength(1);
    // A broke after content for a cause of its own: with consecutive_failures 1 its circuit opened.
    expect(byProvider('h/skip', 'a').breaker.state).toBe('open');
    expect(byProvider('h/skip', 'w').breaker.state).toBe('closed');
    await allIdle('h/skip');
  });

  it('a continuation that fails gets a failure verdict (its circuit opens) and the next one continues', async () => {
    v.setBehavior({ status: 500 });
    w.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });

    const { text } = await stream('h/fail');
    expect(text).toBe(FULL);
    expect(v.requests).toHaveLength(1);
    expect(w.requests).toHaveLength(1);
    expect(byProvider('h/fail', 'v').breaker.state).toBe('open');
    expect(byProvider('h/fail', 'w').counts(Date.now())).toMatchObject({ calls: 1, failures: 0 });
    await allIdle('h/fail');
  });

  it('under weighted, a continuation listed before the deployment that broke is still used', async () => {
    v.setBehavior({ reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });

    const { text, data } = await stream('h/weighted');
    // V has weight 0: A always streams first, and V (earlier in the config) continues it.
    expect(a.requests).toHaveLength(1);
    expect(text).toBe(FULL);
    expect(data.join('\n')).not.toContain('"error"');
    expect(v.requests).toHaveLength(1);
    await allIdle('h/weighted');
  });

  it("the model's first_token_ms bounds a continuation: a silent one is given up and counted as failed", async () => {
    v.setBehavior({ delayHeadersMs: 3000, reply: FULL });
    a.enqueue({ pieces: PIECES, closeAfterChunks: 4 });

    const { data, ms } = await stream('h/slow');
    expect(ms).toBeLessThan(2000);
    expect(data.at(-1)).toContain('"error"');
    expect(v.requests).toHaveLength(1);
    expect(byProvider('h/slow', 'v').breaker.state).toBe('open');
    await allIdle('h/slow');
  });
});
