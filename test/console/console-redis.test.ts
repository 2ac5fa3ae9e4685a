/**
 * The console on a distributed deployment: two instances sharing Redis. A key created in the browser on
 * instance A works on instance B, its revocation is refused on B right after, and the usage chart on A
 * draws the calls B served.
 */
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { type Browser, startBrowser } from './browser.js';

const ADMIN_KEY = 'console-redis-admin-key-0123456789abcdef';

describeRedis('console with Redis, across instances', { timeout: 60_000 }, () => {
  let redis: TestRedis;
  let a: TestGantry;
  let b: TestGantry;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    redis = await startRedis();
    const yaml = `${LOCAL_CONFIG}\nredis: { url: "${redis.url}" }\n`;
    a = await startGantry(yaml, { GANTRY_ADMIN_KEY: ADMIN_KEY });
    b = await startGantry(yaml, { GANTRY_ADMIN_KEY: ADMIN_KEY });
    browser = await startBrowser(a.origin);
    page = browser.page;
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await Promise.all([a?.close(), b?.close()]);
    await redis?.close();
  });

  const modelsOnB = (key: string) =>
    fetch(`${b.baseURL}/models`, { headers: { authorization: `Bearer ${key}` } });

  it('creates a key on A that works on B, and revokes it: B refuses it right after', async () => {
    await page.goto('/console');
    await page.getByLabel('API key or admin key').fill(a.key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'API keys' }).waitFor();

    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByLabel('Name').fill('shared');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.getByRole('dialog', { name: 'Your new key' }).waitFor();
    const created = await page.getByLabel('Key', { exact: true }).inputValue();
    await page.getByRole('button', { name: 'Done' }).click();
    await browser.shot('redis-key-created');

    await waitFor(
      'the new key on instance B',
      async () => ((await modelsOnB(created)).status === 200 ? true : undefined),
      5_000,
      100,
    );

    const row = page.locator('table.keys tbody tr', { hasText: 'shared' });
    await row.getByRole('button', { name: /Revoke/ }).click();
    const confirm = page.getByRole('dialog', { name: /Revoke/ });
    await confirm.getByRole('button', { name: 'Revoke key' }).click();
    await confirm.waitFor({ state: 'detached' });
    // Revocation reaches every instance at once (README, "Admin API").
    await waitFor(
      'the revocation on instance B',
      async () => ((await modelsOnB(created)).status === 401 ? true : undefined),
      1_000,
      50,
    );
  });

  it('draws on A the calls instance B served', async () => {
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${b.baseURL}/chat/completions`, {
        method: 'POST',
        // B's own key of the account `test` (the helper writes it to B's store): one account on both.
        headers: { authorization: `Bearer ${b.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gantry/local-chat', messages: [{ role: 'user', content: `b ${i}` }] }),
      });
      expect(res.status).toBe(200);
    }
    await b.gantry.services.usage.flush();
    const today = new Date().toISOString().slice(0, 10);
    await page.getByRole('link', { name: 'Usage' }).click();
    await page.getByRole('heading', { name: 'Usage' }).waitFor();
    await waitFor(
      'the chart bar of today',
      async () => {
        const bar = page.locator(`svg.chart rect.bar[data-day="${today}"]`);
        if ((await bar.count()) === 0 || Number(await bar.getAttribute('data-value')) < 2) {
          await page.reload();
          return undefined;
        }
        return true;
      },
      10_000,
      250,
    );
    await browser.shot('redis-usage');
  });
});
