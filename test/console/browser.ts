/**
 * A real browser for the console's tests: Debian's Chromium (`/usr/bin/chromium`, installed by .ci/run)
 * driven by playwright-core through its executable path, so nothing is downloaded. One browser per test
 * file; screenshots go to test-results/console/ (kept as CI artefacts).
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';

export const CHROMIUM = process.env.GANTRY_CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = join(new URL('../..', import.meta.url).pathname, 'test-results', 'console');

export interface Browser {
  context: BrowserContext;
  page: Page;
  /** Saves a full-page screenshot as test-results/console/<name>.png. */
  shot(name: string): Promise<void>;
  close(): Promise<void>;
}

export async function startBrowser(origin: string): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'gantry-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1280, height: 900 },
    permissions: ['clipboard-read', 'clipboard-write'],
    baseURL: origin,
  });
  // Grants apply per origin: the console's.
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
  mkdirSync(SHOTS, { recursive: true });
  return {
    context,
    page,
    shot: async (name) => {
      await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
    },
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
