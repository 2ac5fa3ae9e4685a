/**
 * Automatic incidents from model statuses, driven tick by tick with a routing whose statuses the test
 * sets: opened after the delay, updated between degraded and offline, resolved on recovery; one
 * incident for two instances; a restart follows the open incident instead of opening another.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { PlaneDeps } from '../../src/admin/plane.js';
import type { ModelStatus } from '../../src/routing/status.js';
import { AutoIncidents } from '../../src/status/auto-incidents.js';
import { createIncidents, IncidentService } from '../../src/status/incidents.js';
import { SqliteIncidentStore } from '../../src/status/incidents-sqlite.js';
import { SqliteStore } from '../../src/store/sqlite.js';

const AFTER = 30_000;
const T0 = Date.UTC(2026, 0, 10, 12);
const silent = { info() {}, warn() {}, error() {}, debug() {} };

let db: SqliteStore | undefined;
const watchers: AutoIncidents[] = [];
afterEach(() => {
  for (const w of watchers.splice(0)) w.stop();
  db?.close();
  db = undefined;
});

/** A routing stand-in: the test sets each model's status. */
class Statuses {
  readonly now = new Map<string, ModelStatus>([
    ['gantry/x', 'operational'],
    ['gantry/private', 'operational'],
  ]);
  of(ns: string) {
    return this.now.has(ns) ? {} : undefined;
  }
  statusOf(ns: string) {
    const status = this.now.get(ns);
    return status === undefined
      ? undefined
      : {
          status,
          reason: status === 'operational' ? undefined : 'all 1 deployments are unavailable (circuit open)',
        };
  }
}

function setup(statuses: Statuses) {
  db ??= new SqliteStore(':memory:');
  const service = new IncidentService(new SqliteIncidentStore(db.handle), silent);
  const deps = {
    config: { web: { statusPage: { incidentAfterMs: AFTER } } },
    catalog: {
      all: () => [
        { entry: { namespace: 'gantry/x' } },
        { entry: { namespace: 'gantry/private', accounts: ['a'] } },
        { entry: { namespace: 'gantry/predict-only' } },
      ],
    },
    routing: statuses,
    log: silent,
  } as unknown as PlaneDeps;
  const watch = (shared: boolean) => {
    const w = new AutoIncidents(service, deps, shared, 3_600_000);
    watchers.push(w);
    return w;
  };
  return { service, watch };
}

describe('automatic incidents', () => {
  it('open after the delay, follow degraded and offline, resolve on recovery', async () => {
    const statuses = new Statuses();
    const { service, watch } = setup(statuses);
    const auto = watch(false);
    statuses.now.set('gantry/x', 'offline');
    statuses.now.set('gantry/private', 'offline');
    await auto.tick(T0);
    await auto.tick(T0 + AFTER - 1);
    expect(await service.list({})).toEqual([]);
    await auto.tick(T0 + AFTER);
    const [opened, ...rest] = await service.list({});
    expect(rest).toEqual([]);
    // A private model is never named on the public page: no incident for it.
    expect(opened).toMatchObject({
      title: 'gantry/x is offline',
      components: ['gantry/x'],
      impact: 'offline',
      source: 'auto',
      status: 'investigating',
      resolvedAt: null,
    });
    expect(opened?.updates[0]?.message).toContain('circuit open');
    await auto.tick(T0 + AFTER + 1000);
    expect((await service.get(opened?.id ?? ''))?.updates).toHaveLength(1);

    statuses.now.set('gantry/x', 'degraded');
    await auto.tick(T0 + AFTER + 2000);
    const degraded = await service.get(opened?.id ?? '');
    expect(degraded?.impact).toBe('degraded');
    expect(degraded?.updates.at(-1)?.message).toContain('now degraded');

    statuses.now.set('gantry/x', 'operational');
    await auto.tick(T0 + AFTER + 3000);
    const resolved = await service.get(opened?.id ?? '');
    expect(resolved?.resolvedAt).toBe(resolved?.updates.at(-1)?.at);
    expect(resolved?.updates.at(-1)).toMatchObject({
      status: 'resolved',
      message: 'gantry/x is operational again.',
    });
    expect(await service.list({ open: true })).toEqual([]);
  });

  it('a blip shorter than the delay opens nothing', async () => {
    const statuses = new Statuses();
    const { service, watch } = setup(statuses);
    const auto = watch(false);
    statuses.now.set('gantry/x', 'degraded');
    await auto.tick(T0);
    statuses.now.set('gantry/x', 'operational');
    await auto.tick(T0 + AFTER - 1);
    statuses.now.set('gantry/x', 'offline');
    await auto.tick(T0 + AFTER + 1);
    expect(await service.list({})).toEqual([]);
  });

  it('two instances that both see the model offline open one incident; each resolves it at most once', async () => {
    const statuses = new Statuses();
    const { service, watch } = setup(statuses);
    const events: string[] = [];
    service.onEvent((e) => events.push(e.kind));
    const one = watch(true);
    const two = watch(true);
    statuses.now.set('gantry/x', 'offline');
    await Promise.all([one.tick(T0), two.tick(T0)]);
    await Promise.all([one.tick(T0 + AFTER), two.tick(T0 + AFTER)]);
    expect(await service.list({})).toHaveLength(1);
    statuses.now.set('gantry/x', 'operational');
    await Promise.all([one.tick(T0 + AFTER + 1), two.tick(T0 + AFTER + 1)]);
    expect(await service.list({ open: true })).toEqual([]);
    expect(events).toEqual(['opened', 'resolved']);
  });

  it('after a restart the open incident is followed, not opened again', async () => {
    const statuses = new Statuses();
    const { service, watch } = setup(statuses);
    const before = watch(false);
    statuses.now.set('gantry/x', 'offline');
    await before.tick(T0);
    await before.tick(T0 + AFTER);
    before.stop();
    // The new run sees the model offline again.
    const after = watch(false);
    await after.tick(T0 + AFTER + 10_000);
    await after.tick(T0 + 3 * AFTER);
    expect(await service.list({})).toHaveLength(1);
    statuses.now.set('gantry/x', 'operational');
    await after.tick(T0 + 3 * AFTER + 1);
    expect(await service.list({ open: true })).toEqual([]);
  });

  it('an incident left open by a previous run ends once the model held up for the delay (alone, not when shared)', async () => {
    const statuses = new Statuses();
    const { service, watch } = setup(statuses);
    const { incident } = await service.openAuto('gantry/x', {
      title: 'gantry/x is offline',
      components: ['gantry/x'],
      impact: 'offline',
      message: 'down',
    });
    const shared = watch(true);
    const alone = watch(false);
    await shared.tick(T0);
    await shared.tick(T0 + AFTER);
    expect((await service.get(incident.id))?.resolvedAt).toBeNull();
    await alone.tick(T0);
    await alone.tick(T0 + AFTER - 1);
    expect((await service.get(incident.id))?.resolvedAt).toBeNull();
    await alone.tick(T0 + AFTER);
    expect((await service.get(incident.id))?.resolvedAt).not.toBeNull();
  });

  it('resolved by hand while the model is still down: a new one opens after the delay once it changes', async () => {
    const statuses = new Statuses();
    const { service, watch } = setup(statuses);
    const auto = watch(false);
    statuses.now.set('gantry/x', 'offline');
    await auto.tick(T0);
    await auto.tick(T0 + AFTER);
    const [first] = await service.list({});
    await service.resolve(first?.id ?? '', 'closed by hand');
    statuses.now.set('gantry/x', 'degraded');
    await auto.tick(T0 + AFTER + 1);
    expect(await service.list({ open: true })).toEqual([]);
    await auto.tick(T0 + 2 * AFTER + 1);
    const open = await service.list({ open: true });
    expect(open).toHaveLength(1);
    expect(open[0]).toMatchObject({ impact: 'degraded', title: 'gantry/x is degraded' });
  });
});

describe('auto_incidents', () => {
  it('false: model statuses are not watched', async () => {
    db = new SqliteStore(':memory:');
    const deps = (autoIncidents: boolean) =>
      ({
        config: { web: { statusPage: { autoIncidents, incidentAfterMs: AFTER } } },
        store: db,
        redis: undefined,
        catalog: { all: () => [] },
        routing: new Statuses(),
        log: silent,
      }) as unknown as PlaneDeps;
    const off = createIncidents(deps(false));
    const on = createIncidents(deps(true));
    expect(off.watching).toBe(false);
    expect(on.watching).toBe(true);
    await Promise.all([off.close(), on.close()]);
  });
});
