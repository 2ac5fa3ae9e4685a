/**
 * The public status page in a real browser (test/console/browser.ts): a model's only deployment dies, and a
 * person opening /status sees the incident, then sees it resolved once the upstream is back; the feed a
 * reader subscribes to carries both.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { acmeChatModel, bringBack, QUICK_TIMEOUTS, takeOffline } from '../helpers/outage.js';
import { waitFor } from '../helpers/wait.js';
import { type Browser, startBrowser } from './browser.js';

let upstream: FakeOpenAI;
let g: TestGantry;
let browser: Browser;

beforeAll(async () => {
  upstream = await startFakeOpenAI();
  g = await startGantry(`
providers:
  a: { kind: openai, base_url: ${upstream.url}, timeouts: ${QUICK_TIMEOUTS} }
status_page: { incident_after_seconds: 0.5 }
models:
${acmeChatModel('a', 3)}
`);
  browser = await startBrowser(g.origin);
});

afterAll(async () => {
  await browser?.close();
  await g?.close();
  await upstream?.close();
});

async function feedTitles(): Promise<string[]> {
  const xml = await (await fetch(`${g.origin}/status/feed.atom`)).text();
  return [...xml.matchAll(/<entry>[\s\S]*?<title[^>]*>([^<]*)<\/title>/g)].map((m) => m[1] as string);
}

describe('the status page in a browser', () => {
  it('shows an incident after the model’s deployments die, and its resolution; the feed carries both', async () => {
    const { page } = browser;
    await page.goto('/status');
    expect(await page.textContent('body')).toContain('Acme Chat');
    expect(await page.textContent('body')).toContain('No open incidents.');

    const ask = await takeOffline(g, upstream);

    // A person reloads the page until the incident shows (the page is cached a few seconds).
    await waitFor(
      'the incident on the page',
      async () => {
        await page.reload();
        return (await page.textContent('body'))?.includes('acme/chat is offline') ? true : undefined;
      },
      20_000,
      500,
    );
    const open = page.getByRole('heading', { name: 'acme/chat is offline' });
    expect(await open.isVisible()).toBe(true);
    await browser.shot('status-incident-open');
    expect(await feedTitles()).toContain('Incident opened: acme/chat is offline');

    await bringBack(g, upstream, ask);
    await waitFor(
      'the incident resolved on the page',
      async () => {
        await page.reload();
        return (await page.textContent('body'))?.includes('Recently resolved') ? true : undefined;
      },
      20_000,
      500,
    );
    expect(await page.textContent('body')).toContain('No open incidents.');
    await browser.shot('status-incident-resolved');
    expect(await feedTitles()).toEqual(
      expect.arrayContaining([
        'Incident opened: acme/chat is offline',
        'Incident resolved: acme/chat is offline',
      ]),
    );
  });
});
