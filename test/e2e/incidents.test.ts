/**
 * Incidents and model status overrides end to end: a real Gantry in front of fake upstreams. A model's
 * only upstream dies → an automatic incident opens on /status, /status.json and the Atom feed, and is
 * resolved when the upstream comes back; incidents opened, updated and resolved by hand through the admin
 * API show the same way; an override changes /v1/models, the page, and refuses calls when offline. In
 * embedded mode (SQLite) and distributed mode (Redis, two instances → one incident).
 */
import { parseFeed } from '@rowanmanning/feed-parser';
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { errorOf } from '../helpers/api-error.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { acmeChatModel, bringBack, QUICK_TIMEOUTS, secretModel, takeOffline } from '../helpers/outage.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { restCall } from '../helpers/rest.js';
import { waitFor } from '../helpers/wait.js';

const ADMIN_KEY = 'adm_incidents_test_key_0123456789abcdef';

let upstream: FakeOpenAI;
let other: FakeOpenAI;
const gantries: TestGantry[] = [];
let redis: TestRedis | undefined;

beforeAll(async () => {
  [upstream, other] = await Promise.all([startFakeOpenAI(), startFakeOpenAI()]);
});

afterEach(async () => {
  for (const g of gantries.splice(0)) await g.close();
  await redis?.close();
  redis = undefined;
  upstream.reset();
  other.reset();
});

afterAll(async () => {
  await Promise.all([upstream.close(), other.close()]);
});

async function start(env: NodeJS.ProcessEnv = {}, logs?: string[]): Promise<TestGantry> {
  const g = await startGantry(
    `
providers:
  a: { kind: openai, base_url: ${upstream.url}, timeouts: ${QUICK_TIMEOUTS} }
  b: { kind: openai, base_url: ${other.url}, timeouts: ${QUICK_TIMEOUTS} }
  local: { kind: local }
status_page: { incident_after_seconds: 0.5 }
models:
${acmeChatModel('a', 6)}
  - namespace: acme/other
    name: Acme Other
    type: text
    vendor: { name: Acme, slug: acme }
    routes: [{ provider: b, model: m }]
${secretModel('b')}
  - namespace: gantry/local-image
    name: Local image
    type: image
    vendor: { name: Gantry, slug: gantry }
    serves: [predictions]
    routes: [{ provider: local, model: local-image }]
`,
    { GANTRY_ADMIN_KEY: ADMIN_KEY, ...env },
    logs === undefined ? {} : { onLog: (line) => logs.push(line) },
  );
  gantries.push(g);
  return g;
}

const admin = { authorization: `Bearer ${ADMIN_KEY}` };

interface IncidentJson {
  id: string;
  title: string;
  components: string[];
  impact: string;
  status: string;
  source: string;
  opened_at: string;
  resolved_at: string | null;
  updates: Array<{ at: string; status: string; message: string }>;
}

interface StatusJson {
  status: string;
  console?: { id: string; status: string; reason: string | null };
  models: Array<{ id: string; status: string; reason: string | null }>;
  incidents: IncidentJson[];
}

interface Entry {
  id: string;
  title: string;
  updated: string;
  content: { '#text': string };
  category: Array<{ '@_term': string }>;
}

async function statusJson(g: TestGantry): Promise<StatusJson> {
  const res = await fetch(`${g.origin}/status.json`);
  expect(res.status).toBe(200);
  return (await res.json()) as StatusJson;
}

async function feed(g: TestGantry): Promise<Entry[]> {
  const xml = await (await fetch(`${g.origin}/status/feed.atom`)).text();
  expect(XMLValidator.validate(xml)).toBe(true);
  const parsed = new XMLParser({
    ignoreAttributes: false,
    isArray: (name) => name === 'entry' || name === 'category',
  }).parse(xml) as { feed: { entry?: Entry[] } };
  return parsed.feed.entry ?? [];
}

/** Polls /status.json (cached a few seconds) until `check` finds what it wants. */
function waitForStatus<T>(g: TestGantry, what: string, check: (s: StatusJson) => T | undefined): Promise<T> {
  return waitFor(what, async () => check(await statusJson(g)), 20_000, 250);
}

async function autoScenario(env: NodeJS.ProcessEnv = {}): Promise<void> {
  const g = await start(env);
  expect((await statusJson(g)).incidents).toEqual([]);
  const ask = await takeOffline(g, upstream);

  const open = await waitForStatus(g, 'an open incident for acme/chat', (s) =>
    s.incidents.find((i) => i.components.includes('acme/chat') && i.resolved_at === null),
  );
  expect(open).toMatchObject({ title: 'acme/chat is offline', impact: 'offline', source: 'auto' });
  expect(open.updates[0]?.message).toContain('deployments are unavailable');
  const html = await (await fetch(`${g.origin}/status`)).text();
  expect(html).toContain('acme/chat is offline</h3>');
  expect(html).toContain('Affects Acme Chat; impact: Offline.');
  const opened = (await feed(g)).find((e) => e.title === 'Incident opened: acme/chat is offline');
  expect(opened?.id).toMatch(/^urn:uuid:[0-9a-f-]{36}$/);
  expect(opened?.category.map((c) => c['@_term'])).toEqual(['incident', 'opened']);
  // The admin API lists it as open.
  const listed = await restCall<{ data: IncidentJson[] }>(g.origin, 'GET', '/admin/v1/incidents?open=true', {
    key: null,
    headers: admin,
  });
  expect(listed.body.data.map((i) => i.id)).toEqual([open.id]);

  await bringBack(g, upstream, ask);
  const resolved = await waitForStatus(g, 'the incident resolved', (s) =>
    s.incidents.find((i) => i.id === open.id && i.resolved_at !== null),
  );
  expect(resolved.updates.at(-1)).toMatchObject({
    status: 'resolved',
    message: 'acme/chat is operational again.',
  });
  const entries = await feed(g);
  const mine = entries.filter((e) => e.title.endsWith(': acme/chat is offline'));
  expect(mine.map((e) => e.title)).toEqual([
    'Incident resolved: acme/chat is offline',
    'Incident opened: acme/chat is offline',
  ]);
  // Same ids as before: a feed reader does not see the opening twice.
  expect(mine[1]?.id).toBe(opened?.id);
  const page = await (await fetch(`${g.origin}/status`)).text();
  expect(page).toContain('Recently resolved');
  expect(page).toContain('No open incidents.');
}

describe('incidents, embedded mode (SQLite)', () => {
  it('a model whose upstream dies gets an automatic incident on the page and in the feed; it resolves when the upstream comes back', async () => {
    await autoScenario();
  }, 60_000);

  it('incidents opened, updated and resolved through the admin API show on the page and in the feed', async () => {
    const g = await start();
    const call = <T>(method: string, path: string, body?: unknown, headers: Record<string, string> = admin) =>
      restCall<T>(g.origin, method, path, { key: null, headers, ...(body === undefined ? {} : { body }) });

    // Only an operator may open one; an API key is not accepted on the admin API.
    const body = {
      title: 'Console sign-in <slow>',
      components: ['console', 'acme/other'],
      impact: 'degraded',
      message: 'We are looking into slow sign-ins.',
    };
    expect((await call('POST', '/admin/v1/incidents', body, {})).status).toBe(401);
    expect(
      (await call('POST', '/admin/v1/incidents', body, { authorization: `Bearer ${g.key}` })).status,
    ).toBe(401);
    const bad = await call<{ error: { details: string } }>('POST', '/admin/v1/incidents', {
      ...body,
      components: ['secret/private-model'],
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details).toBe('components');
    expect(
      (await call<{ error: { details: string } }>('POST', '/admin/v1/incidents', { ...body, impact: 'x' }))
        .body.error.details,
    ).toBe('impact');

    // An account's owner signed in to the console reads incidents but may not open one.
    const session = await restCall<{ csrf_token: string; role: string }>(
      g.origin,
      'POST',
      '/admin/v1/session',
      {
        key: null,
        body: { key: g.key },
      },
    );
    expect(session.body.role).toBe('owner');
    const owner = {
      cookie: (session.headers.get('set-cookie') ?? '').split(';')[0] ?? '',
      'x-csrf-token': session.body.csrf_token,
    };
    expect((await call('POST', '/admin/v1/incidents', body, owner)).status).toBe(403);
    expect((await call('GET', '/admin/v1/incidents', undefined, owner)).status).toBe(200);

    const created = await call<IncidentJson>('POST', '/admin/v1/incidents', body);
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      title: body.title,
      components: ['console', 'acme/other'],
      impact: 'degraded',
      status: 'investigating',
      source: 'manual',
      resolved_at: null,
    });
    const id = created.body.id;
    const updated = await call<IncidentJson>('PATCH', `/admin/v1/incidents/${id}`, {
      status: 'identified',
      message: 'A slow session store.',
    });
    expect(updated.status).toBe(200);
    expect(updated.body.updates.map((u) => u.status)).toEqual(['investigating', 'identified']);

    const shown = await waitForStatus(g, 'the manual incident', (s) =>
      s.incidents.find((i) => i.id === id && i.status === 'identified') ? s : undefined,
    );
    // An incident naming the console is its status.
    expect(shown.console).toMatchObject({ id: 'console', status: 'degraded', reason: body.title });
    const html = await (await fetch(`${g.origin}/status`)).text();
    expect(html).toContain('Console sign-in &lt;slow&gt;</h3>');
    expect(html).toContain('A slow session store.');
    expect(html).not.toContain('<slow>');

    const resolved = await call<IncidentJson>('POST', `/admin/v1/incidents/${id}/resolve`, {
      message: 'Fixed.',
    });
    expect(resolved.status).toBe(200);
    expect(resolved.body.resolved_at).not.toBeNull();
    expect(
      (await call<{ error: { error_id: string } }>('POST', `/admin/v1/incidents/${id}/resolve`, {})).status,
    ).toBe(409);
    expect((await call('PATCH', '/admin/v1/incidents/inc_nope', { message: 'x' })).status).toBe(404);

    await waitForStatus(g, 'the manual incident resolved', (s) =>
      s.incidents.find((i) => i.id === id && i.resolved_at !== null),
    );
    const entries = (await feed(g)).filter((e) => e.title.endsWith(body.title));
    expect(entries.map((e) => e.title.split(':')[0])).toEqual([
      'Incident resolved',
      'Incident updated',
      'Incident opened',
    ]);
    expect(entries[0]?.content['#text']).toContain('Fixed.');
    expect(new Set(entries.map((e) => e.id)).size).toBe(3);
    const again = (await feed(g)).filter((e) => e.title.endsWith(body.title));
    expect(again.map((e) => e.id)).toEqual(entries.map((e) => e.id));

    // A real feed reader's parser reads the same: the three entries with their titles, links and dates.
    const parsed = parseFeed(await (await fetch(`${g.origin}/status/feed.atom`)).text());
    expect(parsed.meta.type).toBe('atom');
    expect(parsed.self).toBe(`${g.origin}/status/feed.atom`);
    expect(parsed.url).toBe(`${g.origin}/status`);
    const read = parsed.items.filter((i) => i.title?.endsWith(body.title));
    expect(read.map((i) => i.title)).toEqual([
      `Incident resolved: ${body.title}`,
      `Incident updated: ${body.title}`,
      `Incident opened: ${body.title}`,
    ]);
    expect(read.map((i) => i.id)).toEqual(entries.map((e) => e.id));
    const times = [resolved.body.resolved_at, updated.body.updates[1]?.at, created.body.opened_at];
    for (const [n, item] of read.entries()) {
      expect(item.url).toBe(`${g.origin}/status`);
      expect(item.updated?.toISOString()).toBe(times[n]);
      expect(item.published?.toISOString()).toBe(times[n]);
      expect(item.categories.map((c) => c.term)).toEqual(['incident', ['resolved', 'updated', 'opened'][n]]);
    }
    expect(read[0]?.content).toContain('Fixed.');
    expect(read[1]?.content).toContain('A slow session store.');

    const audit = await g.gantry.plane.audit.list({});
    expect(audit.map((a) => a.action).filter((a) => a.startsWith('incident.'))).toEqual([
      'incident.resolve',
      'incident.update',
      'incident.open',
    ]);
    expect(audit[0]).toMatchObject({ actor: 'admin:env', target: id });
  }, 60_000);

  it('an override changes /v1/models and the page; offline refuses calls and predictions until cleared', async () => {
    const g = await start();
    const models = async () =>
      (
        await restCall<{ data: Array<{ id: string; status: string; status_reason?: string }> }>(
          g.origin,
          'GET',
          '/v1/models',
          { key: g.key },
        )
      ).body.data;
    const put = await restCall<{ id: string; status: string; override: { status: string; set_by: string } }>(
      g.origin,
      'PUT',
      '/admin/v1/models/acme/other/status',
      { key: null, headers: admin, body: { status: 'offline', reason: 'Planned maintenance' } },
    );
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({
      id: 'acme/other',
      status: 'offline',
      override: { status: 'offline', set_by: 'admin:env' },
    });
    expect((await models()).find((m) => m.id === 'acme/other')).toMatchObject({
      status: 'offline',
      status_reason: 'Planned maintenance',
    });
    const client = new OpenAI({ apiKey: g.key, baseURL: g.baseURL, maxRetries: 0 });
    const refused = await errorOf(
      client.chat.completions.create({ model: 'acme/other', messages: [{ role: 'user', content: 'hi' }] }),
    );
    expect(refused.status).toBe(403);
    expect((refused.error as { error_id?: string }).error_id ?? JSON.stringify(refused.error)).toContain(
      'MODEL_NOT_ACTIVE',
    );
    await waitForStatus(g, 'the override on the page', (s) =>
      s.models.find(
        (m) => m.id === 'acme/other' && m.status === 'offline' && m.reason === 'Planned maintenance',
      ),
    );
    const bad = await restCall<{ error: { details: string } }>(
      g.origin,
      'PUT',
      '/admin/v1/models/acme/other/status',
      {
        key: null,
        headers: admin,
        body: { status: 'sleepy', reason: 'x' },
      },
    );
    expect(bad.body.error.details).toBe('status');
    expect(
      (
        await restCall(g.origin, 'PUT', '/admin/v1/models/acme/none/status', {
          key: null,
          headers: admin,
          body: { status: 'offline', reason: 'x' },
        })
      ).status,
    ).toBe(404);

    // Predictions of an overridden model are refused likewise.
    await restCall(g.origin, 'PUT', '/admin/v1/models/gantry/local-image/status', {
      key: null,
      headers: admin,
      body: { status: 'offline', reason: 'GPU swap' },
    });
    const prediction = await restCall<{ error: { error_id: string; details: string } }>(
      g.origin,
      'POST',
      '/v1/predictions',
      {
        key: g.key,
        body: { model: 'gantry/local-image', input: { prompt: 'a cat' } },
      },
    );
    expect(prediction.status).toBe(403);
    expect(prediction.body.error).toMatchObject({ error_id: 'MODEL_NOT_ACTIVE', details: 'GPU swap' });
    // A model serving only predictions is not monitored: the page shows its override, and no uptime.
    const unmonitored = (await waitForStatus(g, 'the prediction model offline on the page', (s) =>
      s.models.find((m) => m.id === 'gantry/local-image' && m.status === 'offline'),
    )) as unknown as { monitored: boolean; reason: string; uptime: object };
    expect(unmonitored).toMatchObject({ monitored: false, reason: 'GPU swap', uptime: {} });
    const monitoredModel = (await statusJson(g)).models.find((m) => m.id === 'acme/other') as unknown as {
      monitored: boolean;
      uptime: Record<string, { uptime_percent: number }>;
    };
    expect(monitoredModel.monitored).toBe(true);
    expect(monitoredModel.uptime['90d']?.uptime_percent).toBeGreaterThan(0);
    const page = await (await fetch(`${g.origin}/status`)).text();
    const section = page.slice(page.indexOf('<code>gantry/local-image</code>'));
    expect(section.slice(0, section.indexOf('</section>'))).toContain('Not monitored');
    expect(section.slice(0, section.indexOf('</section>'))).not.toContain('% uptime');

    const listed = await restCall<{ data: Array<{ id: string; override: unknown; visibility: string }> }>(
      g.origin,
      'GET',
      '/admin/v1/models',
      { key: null, headers: admin },
    );
    expect(listed.body.data.find((m) => m.id === 'acme/other')?.override).toMatchObject({
      status: 'offline',
    });
    expect(listed.body.data.find((m) => m.id === 'secret/private-model')?.visibility).toBe('private');

    const cleared = await restCall<{ status: string; override: unknown }>(
      g.origin,
      'DELETE',
      '/admin/v1/models/acme/other/status',
      {
        key: null,
        headers: admin,
      },
    );
    expect(cleared.body).toMatchObject({ status: 'operational', override: null });
    expect((await models()).find((m) => m.id === 'acme/other')?.status).toBe('operational');
    await client.chat.completions.create({
      model: 'acme/other',
      messages: [{ role: 'user', content: 'hi' }],
    });
    const audit = (await g.gantry.plane.audit.list({})).map((a) => a.action);
    expect(audit.filter((a) => a.startsWith('model.'))).toEqual([
      'model.status.clear',
      'model.status.set',
      'model.status.set',
    ]);
  }, 60_000);
});

describeRedis('incidents, distributed mode (Redis)', () => {
  it('the automatic incident opens, shows and resolves from the shared store', async () => {
    redis = await startRedis();
    await autoScenario({ REDIS_URL: redis.url });
  }, 60_000);

  it('two instances that both see the model die open one incident; an override set on one shows on the other', async () => {
    redis = await startRedis();
    const logs: string[][] = [[], []];
    const one = await start({ REDIS_URL: redis.url }, logs[0]);
    const two = await start({ REDIS_URL: redis.url }, logs[1]);
    await Promise.all([takeOffline(one, upstream), takeOffline(two, upstream)]);
    // Each instance judges from its own traffic: both see the model offline past the delay; one opens the
    // incident, the other finds it open and follows it.
    const said = (msg: string) =>
      logs.map((lines) => lines.filter((l) => l.includes(`"msg":"${msg}"`)).length);
    await waitFor('both instances to act on the offline model', () => {
      const [opened, followed] = [said('incident opened'), said('incident already open, followed')];
      const acted = opened.map((n, i) => n + (followed[i] ?? 0));
      return acted.every((n) => n > 0) ? { opened, followed } : undefined;
    });
    expect(said('incident opened').reduce((a, b) => a + b)).toBe(1);
    const all = await one.gantry.plane.incidents.list({});
    expect(all).toHaveLength(1);
    const id = all[0]?.id;
    for (const g of [one, two]) {
      const seen = await waitForStatus(g, 'the incident on each instance', (s) =>
        s.incidents.find((i) => i.id === id),
      );
      expect(seen).toMatchObject({ resolved_at: null, source: 'auto' });
      expect((await feed(g)).some((e) => e.title === 'Incident opened: acme/chat is offline')).toBe(true);
    }

    await restCall(one.origin, 'PUT', '/admin/v1/models/acme/other/status', {
      key: null,
      headers: admin,
      body: { status: 'degraded', reason: 'Slow upstream' },
    });
    await waitFor('the override on the other instance', async () => {
      const res = await restCall<{ data: Array<{ id: string; status: string }> }>(
        two.origin,
        'GET',
        '/v1/models',
        {
          key: two.key,
        },
      );
      return res.body.data.find((m) => m.id === 'acme/other' && m.status === 'degraded');
    });
  }, 60_000);

  it('a restarted instance follows the open incident instead of opening a duplicate', async () => {
    redis = await startRedis();
    const first = await start({ REDIS_URL: redis.url });
    await takeOffline(first, upstream);
    const open = await waitFor('the incident opened', async () => {
      const list = await first.gantry.plane.incidents.list({ open: true });
      return list[0];
    });
    await first.close();
    gantries.splice(gantries.indexOf(first), 1);

    const logs: string[] = [];
    const again = await start({ REDIS_URL: redis.url }, logs);
    const ask = await takeOffline(again, upstream);
    await waitFor('the restarted instance to act on the offline model', () =>
      logs.some(
        (l) => l.includes('"msg":"incident already open, followed"') || l.includes('"msg":"incident opened"'),
      )
        ? true
        : undefined,
    );
    expect(logs.some((l) => l.includes('"msg":"incident opened"'))).toBe(false);
    expect((await again.gantry.plane.incidents.list({})).map((i) => i.id)).toEqual([open.id]);
    // It saw the model down and then back: it resolves the incident it follows.
    await bringBack(again, upstream, ask);
    await waitFor('the followed incident resolved', async () =>
      (await again.gantry.plane.incidents.get(open.id))?.resolvedAt !== null ? true : undefined,
    );
  }, 60_000);
});
