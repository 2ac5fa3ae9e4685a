/**
 * The console in a real browser (Chromium through playwright-core), asserting what a person sees: signing
 * in with a key, a new key shown once and working, a revoked key refused at once, the usage chart of the
 * day's calls, a prediction made from a model's form showing its image, the playground's streamed answer,
 * webhook redelivery, the operator's accounts, the keyboard, and that no secret and no other account's
 * data ever reaches a page. Needs `npm run build` (dist/console).
 */
import { readFileSync } from 'node:fs';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';
import { type Browser, startBrowser } from './browser.js';

const ADMIN_KEY = 'admin-key-for-console-tests-0123456789';
const CONFIG = `${readFileSync(new URL('../../config/gantry.yaml', import.meta.url), 'utf8')}
predictions:
  webhooks:
    allow_private: true
`;

let g: TestGantry;
let b: Browser;
let page: Page;
let receiver: WebhookReceiver;
/** Every secret the pages must never show. */
const secrets: string[] = [];
/** Script errors and CSP violations seen on any page. */
const problems: string[] = [];

/** expect.poll with room for a busy machine (vitest's default is one second). */
function poll<T>(probe: () => Promise<T> | T) {
  return expect.poll(probe, { timeout: 15_000, interval: 100 });
}

async function call(path: string, key: string, body?: unknown): Promise<Response> {
  return fetch(`${g.origin}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? null : JSON.stringify(body),
  });
}

/** The page's HTML and the text of its fields hold none of the secrets. */
async function expectNoSecret(): Promise<void> {
  const html = await page.content();
  const fields = await page.evaluate(() =>
    [...document.querySelectorAll('input, textarea')].map((e) => (e as HTMLInputElement).value).join('\n'),
  );
  const storage = await page.evaluate(() => JSON.stringify({ ...localStorage, ...sessionStorage }));
  for (const secret of secrets) {
    expect(html).not.toContain(secret);
    expect(fields).not.toContain(secret);
    expect(storage).not.toContain(secret);
  }
  // The session cookie is HttpOnly: the page's scripts cannot read it.
  expect(await page.evaluate(() => document.cookie)).toBe('');
}

async function signIn(key: string): Promise<void> {
  await page.goto('/console');
  await page.getByLabel('API key or admin key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
}

beforeAll(async () => {
  g = await startGantry(CONFIG, { GANTRY_ADMIN_KEY: ADMIN_KEY });
  secrets.push(g.key, g.otherKey, ADMIN_KEY);
  receiver = await startWebhookReceiver();
  b = await startBrowser(g.origin);
  page = b.page;
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    if (/Content Security Policy|Refused to/i.test(msg.text())) problems.push(msg.text());
  });
}, 60_000);

afterAll(async () => {
  await b?.close();
  await receiver?.close();
  await g?.close();
});

// A browser on a busy CI machine: more time than the default for each step.
describe('console in a browser', { timeout: 60_000 }, () => {
  it('signs an owner in with a key and opens the keys page; the key field is emptied', async () => {
    await page.goto('/console');
    await poll(() => page.getByRole('heading', { name: 'Sign in to the Gantry console' }).count()).toBe(1);
    const field = page.getByLabel('API key or admin key');
    await field.fill(g.key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    expect(new URL(page.url()).pathname).toBe('/console/keys');
    await poll(() => page.locator('table.keys tbody tr').count()).toBeGreaterThan(0);
    await b.shot('keys');
    await expectNoSecret();
  });

  it('opens the create-key dialog from the keyboard and closes it with Escape, focus returning', async () => {
    // From the top of the page, as a keyboard user starts: the skip link, the menu, then the page's button.
    await page.reload();
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    const path: string[] = [];
    for (let i = 0; i < 20 && path.at(-1) !== 'Create key'; i++) {
      await page.keyboard.press('Tab');
      path.push(await page.evaluate(() => document.activeElement?.textContent?.trim() ?? ''));
    }
    expect(path[0]).toBe('Skip to content');
    expect(path.at(-1), path.join(' → ')).toBe('Create key');
    await page.keyboard.press('Enter');
    const dialog = page.getByRole('dialog', { name: 'Create a key' });
    await dialog.waitFor();
    // The modal takes the focus (its first field).
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('key-name');
    // Tab and Shift+Tab stay within the dialog while it is open.
    for (const key of [
      'Tab',
      'Tab',
      'Tab',
      'Tab',
      'Shift+Tab',
      'Shift+Tab',
      'Shift+Tab',
      'Shift+Tab',
      'Shift+Tab',
    ]) {
      await page.keyboard.press(key);
      expect(await page.evaluate(() => document.activeElement?.closest('dialog') !== null)).toBe(true);
    }
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'detached' });
    await poll(() => page.evaluate(() => document.activeElement?.textContent?.trim())).toBe('Create key');
  });

  let created = '';
  it('creates a key shown once, with a copy button, that works; gone from the page once closed', async () => {
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByLabel('Name').fill('from the console');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    const dialog = page.getByRole('dialog', { name: 'Your new key' });
    await dialog.waitFor();
    await poll(() => dialog.getByText('shown only once').count()).toBe(1);
    created = await page.getByLabel('Key', { exact: true }).inputValue();
    expect(created.length).toBeGreaterThanOrEqual(32);
    await page.getByRole('button', { name: 'Copy' }).click();
    await page.getByRole('button', { name: 'Copied' }).waitFor();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(created);
    await b.shot('key-created');
    await page.getByRole('button', { name: 'Done' }).click();
    await dialog.waitFor({ state: 'detached' });
    secrets.push(created);
    // Listed by name and prefix only.
    const row = page.locator('table.keys tbody tr', { hasText: 'from the console' });
    await row.waitFor();
    expect(await row.textContent()).toContain(created.slice(0, 8));
    await expectNoSecret();
    await page.evaluate(() => navigator.clipboard.writeText(''));
    // It works against the API.
    const models = await call('/v1/models', created);
    expect(models.status).toBe(200);
  });

  it('revokes a key after confirmation: the key gets 401 right after', async () => {
    const row = page.locator('table.keys tbody tr', { hasText: 'from the console' });
    await row.getByRole('button', { name: /Revoke/ }).click();
    const confirm = page.getByRole('dialog', { name: /Revoke/ });
    await confirm.waitFor();
    await confirm.getByRole('button', { name: 'Revoke key' }).click();
    await confirm.waitFor({ state: 'detached' });
    expect((await call('/v1/models', created)).status).toBe(401);
    await poll(() => row.textContent()).toContain('revoked');
    await b.shot('key-revoked');
  });

  it("draws the day's calls in the usage chart and its table", async () => {
    for (let i = 0; i < 3; i++) {
      const res = await call('/v1/chat/completions', g.key, {
        model: 'gantry/local-chat',
        messages: [{ role: 'user', content: `usage ${i}` }],
      });
      expect(res.status).toBe(200);
    }
    await g.gantry.services.usage.flush();
    const today = new Date().toISOString().slice(0, 10);
    const usage = (await (
      await fetch(`${g.origin}/admin/v1/usage?from=${today}&to=${today}`, {
        headers: { authorization: `Bearer ${ADMIN_KEY}` },
      })
    ).json()) as { data: Array<{ account_id: string; requests: number; model: string }> };
    const account = g.store.getAccountByName('test');
    const mine = usage.data.filter((r) => account === undefined || r.account_id === account.id);
    const requests = mine.reduce((n, r) => n + r.requests, 0);
    expect(requests).toBeGreaterThanOrEqual(3);

    await page.getByRole('link', { name: 'Usage' }).click();
    await page.getByRole('heading', { name: 'Usage' }).waitFor();
    const bar = page.locator(`svg.chart rect.bar[data-day="${today}"]`);
    await bar.waitFor();
    expect(await bar.getAttribute('data-value')).toBe(String(requests));
    const height = Number(await bar.getAttribute('height'));
    expect(height).toBeGreaterThan(0);
    // Today has the tallest bar when it is the only day with calls; never taller than the chart.
    expect((await bar.boundingBox())?.height ?? 0).toBeGreaterThan(10);
    const row = page.locator(`table.usage-days tr[data-day="${today}"]`);
    expect(await row.locator('td.requests').textContent()).toBe(String(requests));
    const chat = page.locator('table.usage-models tr[data-model="gantry/local-chat"] td.requests');
    expect(Number(await chat.textContent())).toBeGreaterThanOrEqual(3);
    await b.shot('usage');
  });

  let predictionId = '';
  it("makes a prediction from the local image model's form and shows its image", async () => {
    await page.getByRole('link', { name: 'Models' }).click();
    await page.getByRole('link', { name: 'gantry/local-image' }).click();
    await page.getByRole('heading', { name: 'Create a prediction' }).waitFor();
    // Generated from the input schema: an enum as a select with its default, an integer with its bounds.
    expect(await page.getByLabel('Output Format').inputValue()).toBe('png');
    expect(await page.getByLabel('Number of Outputs').getAttribute('max')).toBe('4');
    await page.getByLabel(/^Prompt/).fill('a golden sunset over the sea');
    await page.getByLabel('Seed').fill('7');
    await page.getByRole('button', { name: 'Run' }).click();
    await page.waitForURL(/\/console\/predictions\/[0-9a-f-]{36}$/);
    predictionId = page.url().split('/').pop() ?? '';
    const img = page.locator('ul.outputs img');
    await img.waitFor({ timeout: 30_000 });
    await poll(() =>
      img.evaluate((el) => (el as HTMLImageElement).complete && (el as HTMLImageElement).naturalWidth),
    ).toBeGreaterThan(0);
    expect(await page.locator('dl.facts').textContent()).toContain('web');
    await b.shot('prediction-image');
    const api = (await (await call(`/v1/predictions/${predictionId}`, g.key)).json()) as { source: string };
    expect(api.source).toBe('web');
  });

  it("plays the speech model's output in an audio player", async () => {
    await page.goto('/console/models/gantry/local-speech');
    await page.getByRole('heading', { name: 'Create a prediction' }).waitFor();
    await page.getByLabel(/^Prompt/).fill('Hello from the console');
    await page.getByRole('button', { name: 'Run' }).click();
    await page.waitForURL(/\/console\/predictions\/[0-9a-f-]{36}$/);
    const audio = page.locator('ul.outputs audio');
    await audio.waitFor({ timeout: 45_000 });
    expect(await audio.getAttribute('controls')).not.toBeNull();
    // The browser read the file: it knows how long the speech lasts.
    await poll(() => audio.evaluate((el) => (el as HTMLAudioElement).duration || 0)).toBeGreaterThan(0.3);
    await b.shot('prediction-audio');
  });

  it('lists predictions with filters, and opens one from the list', async () => {
    await page.getByRole('link', { name: 'Predictions' }).click();
    await page.getByLabel('Source').selectOption('web');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/source=web/);
    const link = page.locator('table.predictions a', { hasText: predictionId.slice(0, 8) });
    await link.waitFor();
    await page.getByLabel('Source').selectOption('api');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/source=api/);
    await poll(() => page.locator('table.predictions a', { hasText: predictionId.slice(0, 8) }).count()).toBe(
      0,
    );
  });

  it("never shows another account's prediction: its id in the URL is not found", async () => {
    const res = await call('/v1/predictions', g.otherKey, {
      model: 'gantry/local-image',
      input: { prompt: 'a private teal night' },
    });
    expect(res.status).toBe(200);
    const other = (await res.json()) as { id: string };
    await page.goto(`/console/predictions/${other.id}`);
    await page.getByRole('heading', { name: 'Prediction not found' }).waitFor();
    expect(await page.content()).not.toContain('a private teal night');
    await page.goto('/console/predictions');
    await page.locator('table.predictions').waitFor();
    expect(await page.content()).not.toContain(other.id.slice(0, 8));
    // Nor through the session the console holds: the other account's things answer 404, its usage is not given.
    const otherAccount = g.store.getAccountByName('other')?.id ?? '';
    const answers = await page.evaluate(
      async ({ id, account }) => {
        const get = async (path: string) => {
          const res = await fetch(path);
          return { status: res.status, body: await res.text() };
        };
        return {
          prediction: await get(`/admin/v1/predictions/${id}`),
          deliveries: await get(`/admin/v1/predictions/${id}/deliveries`),
          keys: await get(`/admin/v1/accounts/${account}/keys`),
          list: await get(`/admin/v1/predictions?account=${account}`),
          usage: await get(`/admin/v1/usage?account=${account}`),
        };
      },
      { id: other.id, account: otherAccount },
    );
    expect(otherAccount).not.toBe('');
    expect(answers.prediction.status).toBe(404);
    expect(answers.deliveries.status).toBe(404);
    expect(answers.keys.status).toBe(404);
    expect(answers.list.body).not.toContain(other.id);
    expect(answers.usage.body).not.toContain(otherAccount);
    await expectNoSecret();
  });

  it('shows the webhook deliveries of a prediction and redelivers one', async () => {
    const res = await call('/v1/predictions', g.key, {
      model: 'gantry/local-image',
      input: { prompt: 'a red kite' },
      webhook: { url: receiver.url, events: ['completed'] },
    });
    expect(res.status).toBe(200);
    const { id } = (await res.json()) as { id: string };
    await receiver.waitFor(1);
    await page.goto(`/console/predictions/${id}`);
    const rows = page.locator('table.deliveries tbody tr');
    await poll(() => rows.count()).toBeGreaterThan(0);
    const before = await rows.count();
    await rows
      .first()
      .getByRole('button', { name: /Redeliver/ })
      .click();
    await receiver.waitFor(2);
    await poll(() => rows.count()).toBe(before + 1);
    // The new delivery is followed on the page until the receiver has it.
    await poll(() => page.locator('table.deliveries tbody tr td:nth-child(3)').allTextContents()).toEqual(
      Array(before + 1).fill('delivered'),
    );
    await b.shot('deliveries');
  });

  it('streams an answer from gantry/local-chat in the playground', async () => {
    await page.getByRole('link', { name: 'Playground' }).click();
    await page.getByLabel('Model').selectOption('gantry/local-chat');
    const streamed = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions'));
    await page.getByLabel('Message').fill('hello from the browser');
    await page.getByRole('button', { name: 'Send' }).click();
    const response = await streamed;
    expect(response.headers()['content-type']).toContain('text/event-stream');
    expect(JSON.parse(response.request().postData() ?? '{}')).toMatchObject({ stream: true });
    // The answer came in pieces (local-chat streams about three tokens a chunk), then [DONE].
    const events = (await response.text()).split('\n\n').filter((e) => e.startsWith('data: {'));
    expect(events.length).toBeGreaterThan(2);
    const answer = page.locator('.message.assistant p');
    await poll(() => answer.textContent()).toContain('You said: hello from the browser');
    await page.getByRole('button', { name: 'Send' }).and(page.locator(':enabled')).waitFor();
    await b.shot('playground');
    await expectNoSecret();
  });

  it("signs an operator in with the admin key: accounts, then the chosen account's keys", async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in to the Gantry console' }).waitFor();
    await signIn(ADMIN_KEY);
    await page.getByRole('heading', { name: 'Accounts' }).waitFor();
    const row = page.locator('table.accounts tbody tr', { hasText: 'test' }).first();
    await row.waitFor();
    await b.shot('accounts');
    await row.getByRole('button', { name: /^Open/ }).click();
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    expect(await page.locator('header .who').textContent()).toBe('Operator admin:env · account test');
    await page.locator('table.keys tbody tr', { hasText: 'from the console' }).waitFor();
    await expectNoSecret();
    // Suspending an account refuses its keys; reactivating it lets them in again.
    await page.getByRole('link', { name: 'Accounts' }).click();
    const other = page.locator('table.accounts tbody tr', { hasText: 'other' });
    await other.getByRole('button', { name: /^Suspend/ }).click();
    await poll(() => other.locator('td').nth(1).textContent()).toBe('suspended');
    expect((await call('/v1/models', g.otherKey)).status).toBeGreaterThanOrEqual(401);
    await other.getByRole('button', { name: /^Reactivate/ }).click();
    await poll(() => other.locator('td').nth(1).textContent()).toBe('active');
    await poll(async () => (await call('/v1/models', g.otherKey)).status).toBe(200);
  });

  it('lets an operator override a model status and open, update and resolve an incident', async () => {
    await page.getByRole('link', { name: 'Models' }).click();
    const row = page.locator('table.models tr[data-model="gantry/local-image"]');
    await row.waitFor();
    await row.getByLabel('New status').selectOption('degraded');
    await row.getByLabel('Reason').fill('slow renders');
    await row.getByRole('button', { name: 'Set' }).click();
    await poll(() => row.locator('.status').textContent()).toBe('degraded');
    const seen = (await (await call('/v1/models/gantry/local-image', g.key)).json()) as { status: string };
    expect(seen.status).toBe('degraded');
    await row.getByRole('button', { name: 'Clear' }).click();
    await poll(() => row.locator('.status').textContent()).toBe('operational');

    await page.getByRole('link', { name: 'Incidents' }).click();
    await page.getByText('Open an incident').click();
    await page.getByLabel('Title').fill('Slow image renders');
    await page.getByRole('checkbox', { name: 'gantry/local-image' }).check();
    await page.getByLabel('Message', { exact: true }).fill('Looking into it.');
    await page.getByRole('button', { name: 'Open incident' }).click();
    const incident = page.getByRole('article', { name: 'Slow image renders' });
    await incident.waitFor();
    await incident.getByLabel('Status').selectOption('monitoring');
    await incident.getByLabel('Message').fill('A fix is out.');
    await incident.getByRole('button', { name: 'Post update' }).click();
    await incident.getByText('A fix is out.').waitFor();
    await b.shot('incidents');
    await incident.getByRole('button', { name: 'Resolve' }).click();
    await poll(() => incident.locator('.status').textContent()).toBe('resolved');
    const status = await (await fetch(`${g.origin}/status.json`)).text();
    expect(status).toContain('Slow image renders');
  });

  it('ran every page without a script error or a CSP violation', () => {
    expect(problems).toEqual([]);
  });
});
