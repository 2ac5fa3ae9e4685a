/**
 * The public status page end to end: a real Gantry in front of fake upstreams (real HTTP servers on
 * 127.0.0.1); one upstream dies so its model goes offline, then recovers; /status, /status.json and the
 * Atom feed show it, in embedded mode (SQLite history) and in distributed mode (Redis history).
 */
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { renderAtom } from '../../src/status/render.js';
import { takeSnapshot } from '../../src/status/snapshot.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { acmeChatModel, bringBack, QUICK_TIMEOUTS, secretModel, takeOffline } from '../helpers/outage.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const HOSTILE = `<script>alert("x")</script> & ' ]]> <!--`;

let a: FakeOpenAI;
let b: FakeOpenAI;
let gantry: TestGantry | undefined;
let redis: TestRedis | undefined;

beforeAll(async () => {
  [a, b] = await Promise.all([startFakeOpenAI(), startFakeOpenAI()]);
});

afterEach(async () => {
  await gantry?.close();
  gantry = undefined;
  await redis?.close();
  redis = undefined;
  a.reset();
  b.reset();
});

afterAll(async () => {
  await Promise.all([a.close(), b.close()]);
});

async function start(env: NodeJS.ProcessEnv = {}): Promise<TestGantry> {
  // YAML single quotes: only ' needs doubling.
  const hostile = HOSTILE.replace(/'/g, "''");
  gantry = await startGantry(
    `
providers:
  a: { kind: openai, base_url: ${a.url}, timeouts: ${QUICK_TIMEOUTS} }
  b: { kind: openai, base_url: ${b.url}, timeouts: ${QUICK_TIMEOUTS} }
models:
${acmeChatModel('a', 8)}
  - namespace: evil/name
    name: '${hostile}'
    type: text
    vendor: { name: Evil, slug: evil }
    routes: [{ provider: b, model: m }]
${secretModel('b')}
`,
    env,
  );
  return gantry;
}

interface StatusJson {
  generated_at: string;
  history_available: boolean;
  status: string;
  api: Component;
  models: Component[];
}
interface Component {
  id: string;
  name: string;
  status: string;
  reason: string | null;
  uptime: Record<
    string,
    {
      bucket_seconds: number;
      uptime_percent: number;
      buckets: Array<{
        start: string;
        end: string;
        status: string;
        uptime_percent: number;
        seconds: Record<string, number>;
      }>;
    }
  >;
}

async function statusJson(g: TestGantry): Promise<StatusJson> {
  const res = await fetch(`${g.origin}/status.json`);
  expect(res.status).toBe(200);
  return (await res.json()) as StatusJson;
}

/** Polls /status.json (cached a few seconds) until acme/chat shows `status`. */
async function waitForStatus(g: TestGantry, status: string): Promise<StatusJson> {
  return waitFor(
    `acme/chat ${status} on /status.json`,
    async () => {
      const body = await statusJson(g);
      return body.models.find((m) => m.id === 'acme/chat')?.status === status ? body : undefined;
    },
    15_000,
    250,
  );
}

async function scenario(env: NodeJS.ProcessEnv = {}): Promise<void> {
  const g = await start(env);

  const before = await statusJson(g);
  expect(before.status).toBe('operational');
  expect(before.history_available).toBe(true);
  expect(before.models.map((m) => m.id)).toEqual(['acme/chat', 'evil/name']);
  expect(before.api.uptime['24h']?.buckets).toHaveLength(24);
  expect(before.api.uptime['7d']?.buckets).toHaveLength(7);
  expect(before.api.uptime['90d']?.buckets).toHaveLength(90);

  // The upstream dies: two failures open the only deployment's circuit, the model is offline (for the
  // 8 s cooldown: longer than the page's cache, so a poll sees it).
  const ask = await takeOffline(g, a);
  const offline = await waitForStatus(g, 'offline');
  const chat = offline.models.find((m) => m.id === 'acme/chat');
  expect(chat?.reason).toContain('deployments are unavailable');
  expect(offline.status).toBe('degraded');
  expect(offline.api.reason).toBe('1 of 2 models not operational');
  expect(chat?.uptime['24h']?.buckets.at(-1)?.status).toBe('offline');

  // It comes back: after the cooldown a trial call closes the circuit.
  await bringBack(g, a, ask);
  const back = await waitForStatus(g, 'operational');
  await g.gantry.routing.flushed();
  expect(back.status).toBe('operational');
  const last = back.models.find((m) => m.id === 'acme/chat')?.uptime['24h'];
  // The current hour saw offline time: its colour is offline, its uptime and the window's below 100.
  expect(last?.buckets.at(-1)?.status).toBe('offline');
  expect(last?.buckets.at(-1)?.seconds.offline).toBeGreaterThan(0);
  expect(last?.buckets.at(-1)?.uptime_percent).toBeLessThan(100);
  expect(last?.uptime_percent).toBeLessThan(100);
  // The hostile name comes back intact in JSON; the restricted model is nowhere.
  expect(back.models.find((m) => m.id === 'evil/name')?.name).toBe(HOSTILE);
  expect(JSON.stringify(back)).not.toContain('secret');

  // HTML: the status, the bars' text, every name escaped.
  const page = await fetch(`${g.origin}/status`);
  expect(page.status).toBe(200);
  expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
  expect(page.headers.get('cache-control')).toMatch(/max-age=\d+/);
  const html = await page.text();
  expect(html).toContain('<h3 id="h-model-0">Acme Chat</h3>');
  expect(html).toContain('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39; ]]&gt; &lt;!--</h3>');
  expect(html).not.toContain('<script');
  expect(html).not.toMatch(/Secret|secret\//);
  expect(html).toMatch(/<li class="offline" title="[^"]+: Offline, [\d.]+% uptime"><span class="sr">/);
  expect(html).toMatch(/Last 24 hours: [\d.]+% uptime/);
  expect(html).not.toMatch(/<script|src=|https?:\/\/(?!www\.w3)/);

  // Feed: well-formed XML, a real parser reads the changes of acme/chat and of the API.
  const feedRes = await fetch(`${g.origin}/status/feed.atom`);
  expect(feedRes.headers.get('content-type')).toBe('application/atom+xml; charset=utf-8');
  const xml = await feedRes.text();
  expect(XMLValidator.validate(xml)).toBe(true);
  const parsed = new XMLParser({ ignoreAttributes: false, isArray: (name) => name === 'entry' }).parse(
    xml,
  ) as {
    feed: {
      id: string;
      title: string;
      updated: string;
      entry: Array<{ id: string; title: string; updated: string; content: { '#text': string } }>;
    };
  };
  const feed = parsed.feed;
  expect(feed.id).toBe(`${g.origin}/status/feed.atom`);
  expect(Number.isNaN(Date.parse(feed.updated))).toBe(false);
  const titles = feed.entry.map((e) => e.title);
  expect(titles).toContain('Acme Chat: Offline');
  expect(titles).toContain('Acme Chat: Operational');
  expect(titles).toContain('API: Degraded');
  expect(titles[0]).toMatch(/Operational$/);
  const offlineEntry = feed.entry.find((e) => e.title === 'Acme Chat: Offline');
  expect(offlineEntry?.content['#text']).toContain('deployments are unavailable');
  expect(feed.entry.every((e) => /^urn:uuid:[0-9a-f-]{36}$/.test(e.id))).toBe(true);
  expect(new Set(feed.entry.map((e) => e.id)).size).toBe(feed.entry.length);
  expect(xml).not.toContain('secret');
  // Stable ids: a fresh snapshot renders the same id for each change.
  const again = renderAtom(await takeSnapshot(g.gantry), g.origin, 0);
  for (const e of feed.entry) expect(again).toContain(`<id>${e.id}</id>`);

  // HEAD and conditional GETs.
  for (const path of ['/status', '/status.json', '/status/feed.atom']) {
    const head = await fetch(`${g.origin}${path}`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
    const etag = head.headers.get('etag');
    expect(etag).toMatch(/^"[\w-]+"$/);
    const get = await fetch(`${g.origin}${path}`, { headers: { 'if-none-match': etag ?? '' } });
    // Same snapshot unless the cache turned over in between; then the tag changed and the body came.
    if (get.headers.get('etag') === etag) {
      expect(get.status).toBe(304);
      expect(await get.text()).toBe('');
    } else expect(get.status).toBe(200);
  }
  const post = await fetch(`${g.origin}/status.json`, { method: 'POST' });
  expect(post.status).toBe(405);
}

describe('status page, embedded mode (SQLite history)', () => {
  it('shows a model going offline and back on /status, /status.json and the feed', async () => {
    await scenario();
  }, 60_000);

  it('needs no key, and a conditional GET of an unchanged resource is 304', async () => {
    const g = await start();
    const first = await fetch(`${g.origin}/status.json`);
    const etag = first.headers.get('etag') ?? '';
    const second = await fetch(`${g.origin}/status.json`, { headers: { 'if-none-match': `W/${etag}` } });
    expect(second.headers.get('etag') === etag ? second.status : 304).toBe(304);
  });
});

describeRedis('status page, distributed mode (Redis history)', () => {
  it('shows a model going offline and back, read from the Redis stream', async () => {
    redis = await startRedis();
    await scenario({ REDIS_URL: redis.url });
  }, 60_000);

  it('still answers when Redis is down, saying the history cannot be read', async () => {
    redis = await startRedis();
    const g = await start({ REDIS_URL: redis.url });
    expect((await statusJson(g)).history_available).toBe(true);
    await redis.stop();
    const body = await waitFor(
      'the page to report the history missing',
      async () => {
        const json = await statusJson(g);
        return json.history_available ? undefined : json;
      },
      20_000,
      250,
    );
    expect(body.models.map((m) => [m.id, m.status])).toEqual([
      ['acme/chat', 'operational'],
      ['evil/name', 'operational'],
    ]);
    const html = await (await fetch(`${g.origin}/status`)).text();
    expect(html).toContain('The status history cannot be read right now');
    // Back up: the page reads the history again (and Gantry's shutdown finds its Redis).
    await redis?.start();
    await waitFor(
      'the history readable again',
      async () => ((await statusJson(g)).history_available ? true : undefined),
      20_000,
      250,
    );
  }, 60_000);
});
