/**
 * Active probes next to real traffic: a model list that answers says little of inference, so a probe's
 * success never closes a circuit that real calls opened; it leaves the trial to the next real call.
 * Real Gantry, a fake upstream on 127.0.0.1, the openai SDK.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { until } from '../helpers/wait.js';

let a: FakeOpenAI;
let gantry: TestGantry;

beforeAll(async () => {
  a = await startFakeOpenAI();
  gantry = await startGantry(`
providers:
  a: { kind: openai, base_url: ${a.url} }
routing: { probes: { enabled: true, interval_seconds: 0.05, idle_seconds: 0, timeout_ms: 500 } }
models:
  - namespace: p/one
    name: One
    type: text
    routes: [{ provider: a, model: m }]
    routing: { breaker: { consecutive_failures: 1, cooldown_seconds: 0.2 } }
`);
});
afterAll(async () => {
  await gantry?.close();
  await a?.close();
});

it('a probe success does not close a circuit opened by real calls; the next real call does', async () => {
  const routing = gantry.gantry.routing.of('p/one');
  const d = routing?.deployments[0];
  if (!d) throw new Error('no deployment');
  // A real call failed (what dispatch reports for a 5xx): the circuit opens.
  const permit = d.begin(Date.now());
  d.failed(permit, Date.now());
  d.end();
  expect(d.breaker.state).toBe('open');
  await until('half-open', () => d.breaker.state === 'half_open');
  // Probes keep answering 200 after the cooldown: the circuit stays half-open.
  const probesBefore = a.requests.length;
  await until('three probes after the cooldown', () => a.requests.length >= probesBefore + 3);
  expect(a.requests.every((r) => r.method === 'GET')).toBe(true);
  expect(d.breaker.state).toBe('half_open');
  // A real call takes the trial and closes it.
  const client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
  await until('a real call through', async () => {
    try {
      await client.chat.completions.create({ model: 'p/one', messages: [{ role: 'user', content: 'x' }] });
      return true;
    } catch {
      // a probe may hold the one trial for a moment: the call gets a 503 and asks again
      return false;
    }
  });
  expect(d.breaker.state).toBe('closed');
});
