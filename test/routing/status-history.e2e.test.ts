/**
 * The status history stays quiet when a deployment's cooldown ends and its trial fails again: a model
 * change caused only by a cooldown ending is not recorded, so a flapping deployment does not fill the
 * history, while a real recovery (a trial that closes the circuit) is. Real Gantry (embedded mode,
 * SQLite history), fake upstreams on 127.0.0.1.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Deployment } from '../../src/routing/health.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { until } from '../helpers/wait.js';

let a: FakeOpenAI;
let b: FakeOpenAI;
let gantry: TestGantry;

beforeAll(async () => {
  [a, b] = await Promise.all([startFakeOpenAI(), startFakeOpenAI()]);
  gantry = await startGantry(`
providers:
  a: { kind: openai, base_url: ${a.url} }
  b: { kind: openai, base_url: ${b.url} }
models:
  - namespace: s/flap
    name: Flap
    type: text
    routes: [{ provider: a, model: m }, { provider: b, model: m }]
    routing: { breaker: { consecutive_failures: 1, cooldown_seconds: 0.2 } }
`);
});
afterAll(async () => {
  await gantry?.close();
  await Promise.all([a?.close(), b?.close()]);
});

async function modelChanges(): Promise<string[]> {
  const routing = gantry.gantry.routing;
  await routing.flushed();
  const changes = await routing.history.list({ model: 's/flap' });
  return changes
    .filter((c) => c.deployment === undefined)
    .reverse()
    .map((c) => `${c.from}>${c.to}`);
}

it('a fallback whose trials keep failing records degraded once; its recovery is recorded', async () => {
  const routing = gantry.gantry.routing;
  const fallback = routing.of('s/flap')?.deployments[1] as Deployment;
  const fail = () => {
    const permit = fallback.begin(Date.now());
    fallback.failed(permit, Date.now());
    fallback.end();
  };
  fail();
  expect(routing.statusOf('s/flap')?.status).toBe('degraded');
  for (let round = 0; round < 3; round++) {
    await until('the cooldown to end', () => fallback.breaker.state === 'half_open');
    // Cooldown over, no traffic: available again (operational), but not recorded.
    expect(routing.statusOf('s/flap')?.status).toBe('operational');
    routing.judgeAll();
    fail();
    expect(routing.statusOf('s/flap')?.status).toBe('degraded');
  }
  expect(await modelChanges()).toEqual(['operational>degraded']);

  await until('the cooldown to end', () => fallback.breaker.state === 'half_open');
  routing.judgeAll();
  const trial = fallback.begin(Date.now());
  fallback.succeeded(trial, Date.now(), 5);
  fallback.end();
  expect(fallback.breaker.state).toBe('closed');
  expect(await modelChanges()).toEqual(['operational>degraded', 'degraded>operational']);
});
