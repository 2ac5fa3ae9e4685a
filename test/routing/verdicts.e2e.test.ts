/**
 * What reaches a deployment's health, and what is answered before any work: a model whose every circuit
 * is open is a 503 with Retry-After before credits, admission and rate limits are spent; a garbled 200
 * counts as a failure; a 401, 403 or 404 gives no verdict (it cannot close a half-open circuit); error
 * answers say how long Gantry itself took. Real Gantry, fake upstreams on 127.0.0.1, the openai SDK.
 */
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Deployment } from '../../src/routing/health.js';
import { OVERHEAD_HEADER } from '../../src/routing/overhead.js';
import { errorOf } from '../helpers/api-error.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { closedPort } from '../helpers/ports.js';
import { until } from '../helpers/wait.js';

const MESSAGES = [{ role: 'user' as const, content: 'x' }];

let gantry: TestGantry | undefined;
let a: FakeOpenAI;

beforeAll(async () => {
  a = await startFakeOpenAI();
});
afterEach(async () => {
  await gantry?.close();
  gantry = undefined;
  a.reset();
});
afterAll(async () => {
  await a?.close();
});

function only(model: string): Deployment {
  const d = gantry?.gantry.routing.of(model)?.deployments[0];
  if (!d) throw new Error(`no deployment for ${model}`);
  return d;
}

function clientOf(g: TestGantry): OpenAI {
  return new OpenAI({ baseURL: g.baseURL, apiKey: g.key, maxRetries: 0 });
}

describe('a model whose every circuit is open', () => {
  it('keeps answering 503 with Retry-After to a rate-limited account, never 429', async () => {
    const url = `http://127.0.0.1:${await closedPort()}/v1`;
    gantry = await startGantry(`
tiers:
  default:
    window_seconds: 60
    model: { requests: 3 }
providers:
  dead: { kind: openai, base_url: ${url}, timeouts: { connect_ms: 300 } }
models:
  - namespace: r/dead
    name: Dead
    type: text
    routes: [{ provider: dead, model: m }]
    routing: { breaker: { consecutive_failures: 1, cooldown_seconds: 60 } }
`);
    const client = clientOf(gantry);
    const first = await errorOf(client.chat.completions.create({ model: 'r/dead', messages: MESSAGES }));
    expect(first.status).toBe(502);
    expect(first.headers?.get(OVERHEAD_HEADER)).toMatch(/^\d+\.\d{3}$/);
    expect(only('r/dead').breaker.state).toBe('open');
    // Far more calls than the 3 a minute the account may make: none of them is counted.
    for (let i = 0; i < 6; i++) {
      const err = await errorOf(
        client.chat.completions.create({ model: 'r/dead', messages: MESSAGES, stream: i % 2 === 0 }),
      );
      expect(err.status).toBe(503);
      expect(err.code).toBe('model_unavailable');
      const retryAfter = Number(err.headers?.get('retry-after'));
      expect(retryAfter).toBeGreaterThanOrEqual(50);
      expect(retryAfter).toBeLessThanOrEqual(60);
    }
    const embeddings = await errorOf(client.embeddings.create({ model: 'r/dead', input: 'x' }));
    expect(embeddings.status).not.toBe(429);
  });
});

describe('verdicts of answers before the client got anything', () => {
  async function start(): Promise<OpenAI> {
    gantry = await startGantry(`
providers:
  a: { kind: openai, base_url: ${a.url} }
models:
  - namespace: v/one
    name: One
    type: text
    routes: [{ provider: a, model: m }]
    routing: { breaker: { consecutive_failures: 1, cooldown_seconds: 0.2 } }
`);
    return clientOf(gantry);
  }

  it('a garbled 200 body counts as a failure', async () => {
    const client = await start();
    a.setBehavior({ malformed: true });
    const err = await errorOf(client.chat.completions.create({ model: 'v/one', messages: MESSAGES }));
    expect(err.status).toBe(502);
    expect(only('v/one').breaker.state).toBe('open');
    expect(only('v/one').counts(Date.now())).toMatchObject({ calls: 1, failures: 1 });
  });

  it.each([401, 403, 404])(
    'a %i gives no verdict: a half-open circuit stays half-open, its trial goes back',
    async (status) => {
      const client = await start();
      a.setBehavior({ status: 500 });
      await errorOf(client.chat.completions.create({ model: 'v/one', messages: MESSAGES }));
      const d = only('v/one');
      expect(d.breaker.state).toBe('open');
      await until('half-open', () => {
        d.breaker.poll(Date.now());
        return d.breaker.state === 'half_open';
      });
      a.setBehavior({ status });
      const err = await errorOf(client.chat.completions.create({ model: 'v/one', messages: MESSAGES }));
      // The trial reached the upstream, which answered with the status (the client gets Gantry's mapping).
      expect(err.status).toBeGreaterThanOrEqual(400);
      expect(a.requests).toHaveLength(2);
      expect(d.breaker.state).toBe('half_open');
      expect(d.breaker.selectable(Date.now())).toBe(true);
      expect(d.inflight).toBe(0);
      // A real answer closes it.
      a.setBehavior({});
      await client.chat.completions.create({ model: 'v/one', messages: MESSAGES });
      expect(d.breaker.state).toBe('closed');
    },
  );

  it("a 400 is the request's fault: a healthy answer, it closes a half-open circuit", async () => {
    const client = await start();
    a.setBehavior({ status: 500 });
    await errorOf(client.chat.completions.create({ model: 'v/one', messages: MESSAGES }));
    const d = only('v/one');
    await until('half-open', () => {
      d.breaker.poll(Date.now());
      return d.breaker.state === 'half_open';
    });
    a.setBehavior({ status: 400 });
    await errorOf(client.chat.completions.create({ model: 'v/one', messages: MESSAGES }));
    expect(d.breaker.state).toBe('closed');
  });
});
