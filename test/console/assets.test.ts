/**
 * The console's files as Gantry serves them (no browser): the page and its hashed assets, precompressed
 * (br, gzip, identity by Accept-Encoding), cached for good or revalidated, a strict CSP, no framing, and
 * nothing at all when the console is disabled. Needs `npm run build` (dist/console).
 */
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';

async function get(url: string, headers: Record<string, string> = {}) {
  const res = await request(url, { headers });
  const body = Buffer.from(await res.body.arrayBuffer());
  const h = (name: string) => {
    const v = res.headers[name];
    return Array.isArray(v) ? v.join(', ') : v;
  };
  return { status: res.statusCode, h, body };
}

describe('console files', () => {
  let g: TestGantry;
  let html = '';
  let script = '';
  let style = '';
  beforeAll(async () => {
    g = await startGantry(LOCAL_CONFIG);
    html = (await get(`${g.origin}/console`)).body.toString('utf8');
    script = /<script type="module" src="([^"]+)"/.exec(html)?.[1] ?? '';
    style = /<link rel="stylesheet" href="([^"]+)"/.exec(html)?.[1] ?? '';
  });
  afterAll(async () => g.close());

  it('answers the page with no-cache, an ETag, a CSP without inline script, no framing, no referrer', async () => {
    const res = await get(`${g.origin}/console`);
    expect(res.status).toBe(200);
    expect(res.h('content-type')).toBe('text/html; charset=utf-8');
    expect(res.h('cache-control')).toBe('no-cache');
    expect(res.h('etag')).toMatch(/^"[\w-]+"$/);
    const csp = res.h('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    expect(csp).not.toContain('unsafe-eval');
    expect(csp).toContain("frame-ancestors 'none'");
    expect(res.h('x-frame-options')).toBe('DENY');
    expect(res.h('referrer-policy')).toBe('no-referrer');
    expect(res.h('x-content-type-options')).toBe('nosniff');
    // Every script of the page is a file of Gantry's: none inline, none from elsewhere.
    const scripts = [...html.matchAll(/<script\b[^>]*>/g)].map((m) => m[0]);
    expect(scripts).toHaveLength(1);
    expect(script).toMatch(/^\/console\/assets\/main-[A-Z0-9]+\.js$/);
    expect(style).toMatch(/^\/console\/assets\/main-[A-Z0-9]+\.css$/);
    expect(html).not.toMatch(/\son[a-z]+=/i);
  });

  it('answers the same page for client routes, and 304 to a matching If-None-Match', async () => {
    for (const path of ['/console/', '/console/keys', '/console/predictions/123?status=failed']) {
      const res = await get(`${g.origin}${path}`);
      expect(res.status, path).toBe(200);
      expect(res.body.toString('utf8')).toBe(html);
    }
    const first = await get(`${g.origin}/console/usage`);
    const again = await get(`${g.origin}/console/usage`, { 'if-none-match': first.h('etag') ?? '' });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
  });

  it('serves hashed assets precompressed by Accept-Encoding, cached for a year as immutable', async () => {
    const plain = await get(`${g.origin}${script}`);
    expect(plain.status).toBe(200);
    expect(plain.h('content-type')).toBe('text/javascript; charset=utf-8');
    expect(plain.h('content-encoding')).toBeUndefined();
    expect(plain.h('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(plain.h('vary')).toBe('accept-encoding');
    expect(plain.body.toString('utf8')).toContain('/admin/v1/session');

    const br = await get(`${g.origin}${script}`, { 'accept-encoding': 'gzip, deflate, br' });
    expect(br.h('content-encoding')).toBe('br');
    expect(br.body.length).toBeLessThan(plain.body.length / 2);
    expect(brotliDecompressSync(br.body).equals(plain.body)).toBe(true);

    const gz = await get(`${g.origin}${script}`, { 'accept-encoding': 'gzip' });
    expect(gz.h('content-encoding')).toBe('gzip');
    expect(gunzipSync(gz.body).equals(plain.body)).toBe(true);

    const refused = await get(`${g.origin}${style}`, { 'accept-encoding': 'br;q=0, gzip' });
    expect(refused.h('content-encoding')).toBe('gzip');
    expect(refused.h('content-type')).toBe('text/css; charset=utf-8');
    expect(gunzipSync(refused.body).toString('utf8')).toContain(':focus-visible');

    const page = await get(`${g.origin}/console`, { 'accept-encoding': 'br' });
    expect(page.h('content-encoding')).toBe('br');
    expect(brotliDecompressSync(page.body).toString('utf8')).toBe(html);
  });

  it('answers 404 for an asset that does not exist', async () => {
    expect((await get(`${g.origin}/console/assets/main-NOPE.js`)).status).toBe(404);
  });
});

describe('console disabled', () => {
  let g: TestGantry;
  beforeAll(async () => {
    g = await startGantry(`${LOCAL_CONFIG}\nconsole:\n  enabled: false\n`);
  });
  afterAll(async () => g.close());

  it('answers 404 for the page, its client routes, its assets and the sign-in', async () => {
    const enabledHtml = await get(`${g.origin}/console`);
    expect(enabledHtml.status).toBe(404);
    expect((await get(`${g.origin}/console/keys`)).status).toBe(404);
    expect((await get(`${g.origin}/console/assets/main.js`)).status).toBe(404);
    const signIn = await request(`${g.origin}/admin/v1/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key: g.key }),
    });
    await signIn.body.dump();
    expect(signIn.statusCode).toBe(404);
  });
});
