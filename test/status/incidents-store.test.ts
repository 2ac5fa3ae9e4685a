/**
 * The incident stores' contract, run against both: SQLite (embedded mode) and Redis (distributed mode,
 * a real redis-server). One open automatic incident per component even when two stores race; a change
 * to a resolved incident is refused; the service emits one event per change.
 */
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { IncidentStore } from '../../src/status/incident-store.js';
import { type Incident, IncidentService, newIncidentId } from '../../src/status/incidents.js';
import { RedisIncidentStore } from '../../src/status/incidents-redis.js';
import { SqliteIncidentStore } from '../../src/status/incidents-sqlite.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { redisServerAvailable, startRedis, type TestRedis } from '../helpers/redis.js';

const T0 = Date.UTC(2026, 0, 10, 12);

function incident(over: Partial<Incident> = {}): Incident {
  const at = over.openedAt ?? T0;
  return {
    id: newIncidentId(),
    title: 'gantry/x is offline',
    components: ['gantry/x'],
    impact: 'offline',
    status: 'investigating',
    source: 'auto',
    openedAt: at,
    resolvedAt: null,
    updates: [{ at, status: 'investigating', message: 'first / "quoted" é' }],
    ...over,
  };
}

const silent = { info() {}, warn() {}, error() {}, debug() {} };

interface Harness {
  /** Two stores over the same data (two instances). */
  make(): Promise<[IncidentStore, IncidentStore]>;
  done(): Promise<void>;
}

function sqliteHarness(): Harness {
  let db: SqliteStore | undefined;
  return {
    async make() {
      db = new SqliteStore(':memory:');
      return [new SqliteIncidentStore(db.handle), new SqliteIncidentStore(db.handle)];
    },
    async done() {
      db?.close();
    },
  };
}

let redis: TestRedis | undefined;
function redisHarness(): Harness {
  const clients: Redis[] = [];
  return {
    async make() {
      if (!redis) throw new Error('no redis');
      const a = new Redis(redis.url);
      const b = new Redis(redis.url);
      clients.push(a, b);
      await a.flushall();
      return [new RedisIncidentStore(a), new RedisIncidentStore(b)];
    },
    async done() {
      for (const c of clients.splice(0)) c.disconnect();
    },
  };
}

beforeAll(async () => {
  if (redisServerAvailable) redis = await startRedis();
});
afterAll(async () => {
  await redis?.close();
});

const modes: Array<[string, () => Harness, boolean]> = [
  ['sqlite', sqliteHarness, true],
  ['redis', redisHarness, redisServerAvailable],
];

for (const [mode, harnessOf, available] of modes) {
  describe.skipIf(!available)(`incident store contract (${mode})`, () => {
    const harness = harnessOf();
    afterEach(() => harness.done());

    it('keeps an incident as given and lists newest opened first', async () => {
      const [store] = await harness.make();
      const a = incident({ source: 'manual', components: ['api', 'console'] });
      const b = incident({ openedAt: T0 + 1000 });
      expect(await store.create(a, undefined)).toBeUndefined();
      expect(await store.create(b, 'gantry/x')).toBeUndefined();
      expect(await store.get(a.id)).toEqual(a);
      expect(await store.get('inc_nope')).toBeUndefined();
      expect((await store.list({})).map((i) => i.id)).toEqual([b.id, a.id]);
      expect((await store.list({ limit: 1 })).map((i) => i.id)).toEqual([b.id]);
    });

    it('one open automatic incident per component, even from two instances at once; a new one after resolving', async () => {
      const [one, two] = await harness.make();
      const a = incident();
      const b = incident();
      const [ra, rb] = await Promise.all([one.create(a, 'gantry/x'), two.create(b, 'gantry/x')]);
      // Exactly one was added; the other answer is the one that was.
      const winner = ra === undefined ? a : b;
      expect([ra, rb].filter((r) => r === undefined)).toHaveLength(1);
      expect((ra ?? rb)?.id).toBe(winner.id);
      expect((await one.list({ open: true })).map((i) => i.id)).toEqual([winner.id]);
      expect((await two.openAutoOf('gantry/x'))?.id).toBe(winner.id);
      expect(await one.openAutoOf('gantry/y')).toBeUndefined();
      // Another component is its own.
      expect(await one.create(incident({ components: ['gantry/y'] }), 'gantry/y')).toBeUndefined();
      // Manual incidents never block.
      expect(await one.create(incident({ source: 'manual' }), undefined)).toBeUndefined();

      const resolved = await one.resolve(winner.id, { at: T0 + 5000, status: 'resolved', message: 'ok' });
      expect(resolved).toMatchObject({ status: 'resolved', resolvedAt: T0 + 5000 });
      expect(await two.openAutoOf('gantry/x')).toBeUndefined();
      const next = incident({ openedAt: T0 + 6000 });
      expect(await two.create(next, 'gantry/x')).toBeUndefined();
      expect((await one.openAutoOf('gantry/x'))?.id).toBe(next.id);
    });

    it('updates append and set status and impact; nothing changes a resolved incident', async () => {
      const [store, other] = await harness.make();
      const a = incident();
      await store.create(a, 'gantry/x');
      const updated = await store.append(
        a.id,
        { at: T0 + 1, status: 'identified', message: 'now degraded' },
        'degraded',
      );
      expect(updated).toMatchObject({ status: 'identified', impact: 'degraded', resolvedAt: null });
      expect((updated as Incident).updates.map((u) => u.message)).toEqual([
        'first / "quoted" é',
        'now degraded',
      ]);
      expect(await store.append('inc_nope', { at: T0, status: 'monitoring', message: 'x' })).toBe('missing');

      // Two resolves race: one wins, the other is told it is resolved already.
      const results = await Promise.all([
        store.resolve(a.id, { at: T0 + 2, status: 'resolved', message: 'one' }),
        other.resolve(a.id, { at: T0 + 3, status: 'resolved', message: 'two' }),
      ]);
      expect(results.filter((r) => r === 'resolved')).toHaveLength(1);
      const final = (await store.get(a.id)) as Incident;
      expect(final.updates).toHaveLength(3);
      expect(final.updates.at(-1)?.status).toBe('resolved');
      expect(await store.append(a.id, { at: T0 + 4, status: 'monitoring', message: 'late' })).toBe(
        'resolved',
      );
      expect((await store.get(a.id))?.updates).toHaveLength(3);
    });

    it('an impact-only update equal to the current impact is skipped, even from two instances at once', async () => {
      const [one, two] = await harness.make();
      const a = incident();
      await one.create(a, 'gantry/x');
      // Both instances saw the model go from offline to degraded: the change is appended once.
      const results = await Promise.all([
        one.append(a.id, { at: T0 + 1, status: 'investigating', message: 'now degraded' }, 'degraded', true),
        two.append(a.id, { at: T0 + 2, status: 'investigating', message: 'now degraded' }, 'degraded', true),
      ]);
      expect(results.filter((r) => r === 'unchanged')).toHaveLength(1);
      expect(results.find((r) => r !== 'unchanged')).toMatchObject({ impact: 'degraded' });
      // Already offline: nothing to say.
      const b = incident({ components: ['gantry/y'] });
      await one.create(b, 'gantry/y');
      expect(
        await two.append(b.id, { at: T0 + 3, status: 'investigating', message: 'x' }, 'offline', true),
      ).toBe('unchanged');
      expect((await one.get(b.id))?.updates).toHaveLength(1);
      // Without the flag an operator's update is kept even with the same impact.
      expect(
        await one.append(b.id, { at: T0 + 4, status: 'identified', message: 'y' }, 'offline'),
      ).toMatchObject({
        status: 'identified',
      });
      expect((await one.get(a.id))?.updates.map((u) => u.message)).toEqual([
        'first / "quoted" é',
        'now degraded',
      ]);

      // Two services (two instances): one event for the change, none for the repeat.
      const events: string[] = [];
      const services = [new IncidentService(one, silent), new IncidentService(two, silent)];
      for (const s of services) s.onEvent((e) => events.push(`${e.kind}:${e.incident.impact}`));
      await Promise.all(
        services.map((s) =>
          s.update(a.id, { impact: 'offline', impactChangeOnly: true, message: 'offline again' }),
        ),
      );
      expect(events).toEqual(['updated:offline']);
      expect((await one.get(a.id))?.updates).toHaveLength(3);
    });

    it('lists open ones only, or open ones and those resolved since a time', async () => {
      const [store] = await harness.make();
      const old = incident({ source: 'manual', openedAt: T0 - 10_000 });
      const recent = incident({ source: 'manual', openedAt: T0 - 5_000 });
      const open = incident({ source: 'manual', openedAt: T0 - 20_000 });
      for (const i of [old, recent, open]) await store.create(i, undefined);
      await store.resolve(old.id, { at: T0 - 9_000, status: 'resolved', message: 'done' });
      await store.resolve(recent.id, { at: T0 - 1_000, status: 'resolved', message: 'done' });
      expect((await store.list({ open: true })).map((i) => i.id)).toEqual([open.id]);
      expect((await store.list({ since: T0 - 2_000 })).map((i) => i.id)).toEqual([recent.id, open.id]);
      expect((await store.list({})).map((i) => i.id)).toEqual([recent.id, old.id, open.id]);
    });

    it('the service emits one event per change and refuses changes to resolved or unknown incidents', async () => {
      const [store] = await harness.make();
      let clock = T0;
      const service = new IncidentService(store, silent, () => clock);
      const events: string[] = [];
      service.onEvent((e) => events.push(`${e.kind}:${e.incident.status}`));
      const opened = await service.open({
        title: 'Maintenance',
        components: ['api'],
        impact: 'maintenance',
        message: 'planned',
      });
      expect(opened).toMatchObject({ source: 'manual', status: 'investigating', openedAt: T0 });
      clock += 1000;
      await service.update(opened.id, { status: 'monitoring', message: 'nearly' });
      clock += 1000;
      const done = await service.resolve(opened.id);
      expect(done.resolvedAt).toBe(T0 + 2000);
      expect(done.updates.map((u) => u.status)).toEqual(['investigating', 'monitoring', 'resolved']);
      await expect(service.resolve(opened.id)).rejects.toMatchObject({ errorId: 'CONFLICT' });
      await expect(service.update('inc_nope', { message: 'x' })).rejects.toMatchObject({
        errorId: 'NOT_FOUND',
      });
      const auto = await service.openAuto('gantry/x', {
        title: 'gantry/x is offline',
        components: ['gantry/x'],
        impact: 'offline',
        message: 'down',
      });
      const again = await service.openAuto('gantry/x', {
        title: 'gantry/x is offline',
        components: ['gantry/x'],
        impact: 'offline',
        message: 'down',
      });
      expect(auto.opened).toBe(true);
      expect(again).toEqual({ incident: auto.incident, opened: false });
      expect(events).toEqual([
        'opened:investigating',
        'updated:monitoring',
        'resolved:resolved',
        'opened:investigating',
      ]);
    });
  });
}
