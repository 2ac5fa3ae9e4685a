import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';

/**
 * The router decodes a path before matching it, so a percent-encoded /v1 path reaches the same route: it
 * needs the same key, and without one gets the same 401 (never the route's answer, never a 500).
 */
describe('percent-encoded paths', () => {
  let g: TestGantry;
  beforeAll(async () => {
    g = await startGantry(LOCAL_CONFIG);
  });
  afterAll(async () => g.close());

  const chat = JSON.stringify({ model: 'gantry/local-chat', messages: [{ role: 'user', content: 'hi' }] });
  const cases: Array<[string, string, string | undefined]> = [
    ['POST', '/%76%31/chat/completions', chat],
    ['POST', '/v1/chat/%63ompletions', chat],
    ['POST', '/%761/embeddings', JSON.stringify({ model: 'gantry/local-embed', input: 'hi' })],
    ['GET', '/%761/models', undefined],
    ['GET', '/v1/%6dodels', undefined],
    ['POST', '/%76%31/predictions', JSON.stringify({ model: 'gantry/local-image', input: { prompt: 'x' } })],
    ['GET', '/%76%31/responses/resp_x', undefined],
  ];

  it.each(cases)('%s %s without a key is 401', async (method, path, body) => {
    const res = await fetch(`${g.origin}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body }),
    });
    expect(res.status).toBe(401);
  });

  it('serves the encoded path with a key, as the plain one', async () => {
    const res = await fetch(`${g.origin}/%76%31/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${g.key}` },
      body: chat,
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { object: string }).object).toBe('chat.completion');
  });
});
