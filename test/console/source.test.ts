/**
 * A prediction made on a console session (the model form) has `source: "web"`; one made with a key keeps
 * `source: "api"`. Both are listed under their source by the admin API's filter.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGantry, type TestGantry } from '../helpers/gantry.js';

const CONFIG = readFileSync(new URL('../../config/gantry.yaml', import.meta.url), 'utf8');

describe('prediction source', () => {
  let g: TestGantry;
  beforeAll(async () => {
    g = await startGantry(CONFIG);
  });
  afterAll(async () => g.close());

  it('is web on a console session and api with a key', async () => {
    const signIn = await fetch(`${g.origin}/admin/v1/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key: g.key }),
    });
    const cookie = (signIn.headers.get('set-cookie') ?? '').split(';')[0] as string;
    const { csrf_token } = (await signIn.json()) as { csrf_token: string };
    const body = JSON.stringify({ model: 'gantry/local-image', input: { prompt: 'a blue door' } });

    const web = await fetch(`${g.origin}/v1/predictions`, {
      method: 'POST',
      headers: { cookie, 'x-csrf-token': csrf_token, 'content-type': 'application/json' },
      body,
    });
    expect(web.status).toBe(200);
    const fromWeb = (await web.json()) as { id: string; source: string };
    expect(fromWeb.source).toBe('web');

    const api = await fetch(`${g.origin}/v1/predictions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${g.key}`, 'content-type': 'application/json' },
      body,
    });
    const fromApi = (await api.json()) as { id: string; source: string };
    expect(fromApi.source).toBe('api');

    const list = async (source: string) => {
      const res = await fetch(`${g.origin}/admin/v1/predictions?source=${source}`, { headers: { cookie } });
      return ((await res.json()) as { data: Array<{ id: string }> }).data.map((p) => p.id);
    };
    expect(await list('web')).toEqual([fromWeb.id]);
    expect(await list('api')).toEqual([fromApi.id]);
    // Read back later, the source stays.
    const again = await fetch(`${g.origin}/v1/predictions/${fromWeb.id}`, {
      headers: { authorization: `Bearer ${g.key}` },
    });
    expect(((await again.json()) as { source: string }).source).toBe('web');
  });
});
