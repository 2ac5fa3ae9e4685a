/**
 * The snapshot behind the status page, read from a real Gantry's history (SQLite): changes recorded at
 * known times land in the right bars, and a change recorded by several instances is one feed entry.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { API_ID, takeSnapshot } from '../../src/status/snapshot.js';
import { HOUR } from '../../src/status/uptime.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';

let gantry: TestGantry | undefined;
let upstream: FakeOpenAI | undefined;

afterEach(async () => {
  await gantry?.close();
  await upstream?.close();
  gantry = undefined;
  upstream = undefined;
});

describe('takeSnapshot', () => {
  it('puts recorded changes in their bars and shows a change seen by two instances once', async () => {
    upstream = await startFakeOpenAI();
    gantry = await startGantry(`
providers:
  a: { kind: openai, base_url: ${upstream.url} }
models:
  - namespace: acme/chat
    name: Acme Chat
    type: text
    routes: [{ provider: a, model: m }]
`);
    const history = gantry.gantry.routing.history;
    // now = 12:30 UTC; offline from 09:00 to 09:30 (seen by two instances), recovered at 09:30.
    const now = Date.UTC(2026, 0, 10, 12, 30);
    const nine = Date.UTC(2026, 0, 10, 9);
    const change = { model: 'acme/chat', deployment: undefined, reason: 'all 1 deployments are unavailable' };
    await history.record({ ...change, at: nine, from: 'operational', to: 'offline', instance: 'one' });
    await history.record({ ...change, at: nine + 1000, from: 'operational', to: 'offline', instance: 'two' });
    await history.record({
      ...change,
      at: nine + HOUR / 2,
      from: 'offline',
      to: 'operational',
      instance: 'one',
    });
    // A deployment's change is not the model's status.
    await history.record({
      ...change,
      deployment: 'a/m',
      at: nine,
      from: 'closed',
      to: 'open',
      instance: 'one',
    });

    const s = await takeSnapshot(gantry.gantry, now);
    const day = s.models[0]?.uptime['24h'];
    const bars = day?.buckets ?? [];
    expect(bars).toHaveLength(24);
    // The 09:00 bar is the 4th from the end (09, 10, 11, 12).
    const nineBar = bars.at(-4);
    expect(nineBar?.start).toBe('2026-01-10T09:00:00.000Z');
    expect(nineBar?.status).toBe('offline');
    expect(nineBar?.uptime_percent).toBe(50);
    expect(nineBar?.seconds).toEqual({ operational: 1800, degraded: 0, offline: 1800 });
    expect(bars.at(-5)?.status).toBe('operational');
    expect(bars.at(-1)?.end).toBe('2026-01-10T12:30:00.000Z');
    // 30 minutes offline over 23.5 hours.
    expect(day?.uptime_percent).toBe(Math.round((1 - 0.5 / 23.5) * 10_000) / 100);
    // The API had one model: offline with it.
    expect(s.api.uptime['24h']?.buckets.at(-4)?.status).toBe('offline');

    const mine = s.changes.filter((c) => c.component === 'acme/chat');
    expect(mine.map((c) => [c.to, c.instance])).toEqual([
      ['operational', 'one'],
      ['offline', 'one'],
    ]);
    expect(s.changes.filter((c) => c.component === API_ID).map((c) => c.to)).toEqual([
      'operational',
      'offline',
    ]);
  });
});
