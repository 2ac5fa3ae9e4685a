/**
 * Overrides and a config's `status` in the status history: what the page shows is what its bars and
 * feed tell. A real Gantry (embedded mode, SQLite history); overrides set and cleared through the admin
 * API; snapshots taken hours later to see the override hold for a while.
 */
import { afterEach, expect, it } from 'vitest';
import { takeSnapshot } from '../../src/status/snapshot.js';
import { DAY, HOUR } from '../../src/status/uptime.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { restCall } from '../helpers/rest.js';
import { waitFor } from '../helpers/wait.js';

const ADMIN_KEY = 'adm_overrides_history_key_0123456789abc';

let gantry: TestGantry | undefined;
let upstream: FakeOpenAI | undefined;

afterEach(async () => {
  await gantry?.close();
  await upstream?.close();
  gantry = undefined;
  upstream = undefined;
});

it('an override set and cleared is a change of the history: bars, uptime and feed follow it, and clearing keeps the past', async () => {
  upstream = await startFakeOpenAI();
  gantry = await startGantry(
    `
providers:
  a: { kind: openai, base_url: ${upstream.url} }
models:
  - namespace: acme/fresh
    name: Acme Fresh
    type: text
    routes: [{ provider: a, model: m }]
  - namespace: acme/known
    name: Acme Known
    type: text
    routes: [{ provider: a, model: m }]
  - namespace: acme/retired
    name: Acme Retired
    type: text
    status: offline
    routes: [{ provider: a, model: m }]
`,
    { GANTRY_ADMIN_KEY: ADMIN_KEY },
  );
  const g = gantry.gantry;
  const admin = (method: string, model: string, body?: unknown) =>
    restCall(gantry?.origin ?? '', method, `/admin/v1/models/${model}/status`, {
      key: null,
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
      ...(body === undefined ? {} : { body }),
    });
  // acme/known has a history: degraded for an hour two days ago.
  const twoDaysAgo = Date.now() - 2 * DAY;
  const change = { model: 'acme/known', deployment: undefined, instance: 'old' };
  await g.routing.history.record({
    ...change,
    at: twoDaysAgo,
    from: 'operational',
    to: 'degraded',
    reason: 'slow',
  });
  await g.routing.history.record({
    ...change,
    at: twoDaysAgo + HOUR,
    from: 'degraded',
    to: 'operational',
    reason: 'deployments healthy',
  });

  // The config's status is recorded once, at start.
  const configured = await waitFor('the config status recorded', async () => {
    const list = await g.routing.history.list({ model: 'acme/retired' });
    return list.length > 0 ? list : undefined;
  });
  expect(configured).toMatchObject([
    {
      from: 'operational',
      to: 'offline',
      reason: 'set in the configuration',
      deployment: undefined,
    },
  ]);

  const setAt = Date.now();
  for (const model of ['acme/fresh', 'acme/known']) {
    expect((await admin('PUT', model, { status: 'offline', reason: 'Planned maintenance' })).status).toBe(
      200,
    );
  }
  await g.routing.flushed();

  // Three hours into the override.
  const later = setAt + 3 * HOUR;
  const during = await takeSnapshot(g, later);
  for (const id of ['acme/fresh', 'acme/known', 'acme/retired']) {
    const m = during.models.find((x) => x.id === id);
    expect(m?.status).toBe('offline');
    const day = m?.uptime['24h'];
    // The bars since the override are offline ...
    expect(day?.buckets.at(-1)?.status).toBe('offline');
    expect(day?.buckets.at(-2)?.status).toBe('offline');
    expect(day?.buckets.at(-1)?.uptime_percent).toBe(0);
    // ... those before it are not: the time before counts as the status shown then.
    expect(day?.buckets.at(-6)?.status).toBe('operational');
    const quarter = m?.uptime['90d']?.uptime_percent ?? 0;
    expect(quarter).toBeGreaterThan(99);
    expect(quarter).toBeLessThan(100);
  }
  // acme/known keeps its own past.
  const known = during.models.find((x) => x.id === 'acme/known');
  expect(known?.uptime['7d']?.buckets.some((b) => b.status === 'degraded')).toBe(true);
  const feed = during.changes.filter((c) => c.component === 'acme/fresh');
  expect(feed).toMatchObject([
    { from: 'operational', to: 'offline', reason: 'set by operator: Planned maintenance' },
  ]);
  expect(during.changes.some((c) => c.component === 'acme/retired' && c.to === 'offline')).toBe(true);

  // Cleared: the model is operational again, the outage stays in the past.
  expect((await admin('DELETE', 'acme/fresh')).status).toBe(200);
  await g.routing.flushed();
  const after = await takeSnapshot(g, Date.now() + HOUR / 60);
  const fresh = after.models.find((x) => x.id === 'acme/fresh');
  expect(fresh?.status).toBe('operational');
  const bars = fresh?.uptime['24h']?.buckets ?? [];
  const offlineBars = bars.filter((b) => b.status === 'offline');
  expect(offlineBars.length).toBeGreaterThan(0);
  expect(after.changes.filter((c) => c.component === 'acme/fresh').map((c) => [c.to, c.reason])).toEqual([
    ['operational', 'deployments healthy'],
    ['offline', 'set by operator: Planned maintenance'],
  ]);
}, 30_000);
