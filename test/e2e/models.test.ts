import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addKey, LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

let gantry: TestGantry;
let client: OpenAI;

beforeAll(async () => {
  gantry = await startGantry(LOCAL_CONFIG);
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(() => gantry.close());

async function get(path: string, key: string | null = gantry.key, headers: Record<string, string> = {}) {
  const res = await fetch(gantry.origin + path, {
    headers: { ...(key ? { 'x-api-key': key } : {}), ...headers },
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown>, headers: res.headers };
}

describe('GET /v1/models', () => {
  it('lists the visible models in both the spec and the OpenAI shapes', async () => {
    const { status, body } = await get('/v1/models');
    expect(status).toBe(200);
    assertOpenAISchema('ListModelsResponse', body);
    const data = body.data as Array<Record<string, unknown>>;
    expect(data.map((m) => m.id)).toEqual([
      'gantry/local-chat',
      'gantry/local-embed',
      'acme/secret-chat',
      'acme/image-gen',
    ]);
    expect(body.models).toEqual(data);
    expect(body.has_more).toBe(false);
    const chat = data[0] as Record<string, unknown>;
    expect(chat).toMatchObject({
      namespace: 'gantry/local-chat',
      object: 'model',
      owned_by: 'gantry',
      type: 'text',
    });
    for (const field of [
      'name',
      'description',
      'privacy',
      'img_url',
      'vendor',
      'billable',
      'pricing',
      'status',
    ]) {
      expect(chat).toHaveProperty(field);
    }
    expect(chat).not.toHaveProperty('input_schema');
    expect(chat).not.toHaveProperty('routes');
  });

  it('hides models the account may not use', async () => {
    const { body } = await get('/v1/models', gantry.otherKey);
    const ids = (body.data as Array<{ id: string }>).map((m) => m.id);
    expect(ids).not.toContain('acme/secret-chat');
    expect(ids).toContain('gantry/local-chat');
  });

  it('pages with limit/offset and page/per_page, and says has_more', async () => {
    const first = await get('/v1/models?limit=2');
    expect((first.body.data as unknown[]).length).toBe(2);
    expect(first.body.has_more).toBe(true);
    const rest = await get('/v1/models?limit=2&offset=2');
    expect((rest.body.data as Array<{ id: string }>).map((m) => m.id)).toEqual([
      'acme/secret-chat',
      'acme/image-gen',
    ]);
    expect(rest.body.has_more).toBe(false);
    const page2 = await get('/v1/models?page=2&per_page=3');
    expect((page2.body.data as Array<{ id: string }>).map((m) => m.id)).toEqual(['acme/image-gen']);
  });

  it('filters by vendor, type and status', async () => {
    const byVendor = await get('/v1/models?vendor=acme');
    expect((byVendor.body.data as Array<{ id: string }>).map((m) => m.id)).toEqual([
      'acme/secret-chat',
      'acme/image-gen',
    ]);
    const byType = await get('/v1/models?type=image');
    expect((byType.body.data as Array<{ id: string }>).map((m) => m.id)).toEqual(['acme/image-gen']);
    const degraded = await get('/v1/models?status=degraded');
    expect((degraded.body.data as Array<{ id: string }>).map((m) => m.id)).toEqual(['acme/image-gen']);
  });

  it('rejects bad paging and filters with INVALID_PARAMETER in the REST envelope', async () => {
    for (const query of ['limit=0', 'limit=abc', 'offset=-1', 'per_page=500', 'status=broken']) {
      const { status, body } = await get(`/v1/models?${query}`);
      expect(status, query).toBe(400);
      expect(body).toMatchObject({
        status: false,
        error: {
          error_id: 'INVALID_PARAMETER',
          http_status: 400,
          type: 'invalid_request_error',
          code: 'invalid_parameter',
        },
      });
    }
    const err = await client.models.list({ query: { limit: 0 } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('invalid_parameter');
  });

  it('works through the official SDK', async () => {
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toContain('gantry/local-embed');
  });
});

describe('GET /v1/models/{slug}', () => {
  it('finds a slug with a slash, encoded or not', async () => {
    const plain = await get('/v1/models/gantry/local-chat');
    expect(plain.status).toBe(200);
    assertOpenAISchema('Model', plain.body);
    const encoded = await get('/v1/models/gantry%2Flocal-chat');
    expect(encoded.body).toEqual(plain.body);
    const viaSdk = await client.models.retrieve('gantry/local-chat');
    expect(viaSdk.id).toBe('gantry/local-chat');
  });

  it('adds schemas only when asked with fields', async () => {
    const without = await get('/v1/models/acme/secret-chat');
    expect(without.body).not.toHaveProperty('input_schema');
    const withSchemas = await get('/v1/models/acme/secret-chat?fields=input_schema,output_schema');
    expect(withSchemas.body.input_schema).toEqual({
      type: 'object',
      properties: { prompt: { type: 'string' } },
    });
    expect(withSchemas.body.output_schema).toEqual({});
    const bad = await get('/v1/models/acme/secret-chat?fields=routes');
    expect(bad.status).toBe(400);
  });

  it('answers 404 MODEL_NOT_FOUND for unknown and for invisible models', async () => {
    const unknown = await get('/v1/models/nobody/nothing');
    expect(unknown.status).toBe(404);
    // The spec's REST envelope, with OpenAI's type and code added inside `error`.
    expect(unknown.body).toEqual({
      status: false,
      response: 'Model nobody/nothing not found',
      error: {
        http_status: 404,
        message: 'Model nobody/nothing not found',
        details: 'GET /v1/models lists the models your key may use.',
        error_id: 'MODEL_NOT_FOUND',
        type: 'not_found_error',
        code: 'model_not_found',
      },
    });
    const hidden = await get('/v1/models/acme/secret-chat', gantry.otherKey);
    expect(hidden.status).toBe(404);
    expect(hidden.body).toEqual(
      expect.objectContaining({ error: expect.objectContaining({ code: 'model_not_found' }) }),
    );
    const err = await client.models.retrieve('nobody/nothing').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    const notFound = err as InstanceType<typeof OpenAI.NotFoundError>;
    expect(notFound.status).toBe(404);
    expect(notFound.code).toBe('model_not_found');
    expect(notFound.type).toBe('not_found_error');
  });
});

describe('authentication', () => {
  it('accepts the key as x-api-key or as a Bearer token', async () => {
    expect((await get('/v1/models', gantry.key)).status).toBe(200);
    expect((await get('/v1/models', null, { authorization: `Bearer ${gantry.key}` })).status).toBe(200);
  });

  it('answers 401 UNAUTHORIZED for a missing, unknown or revoked key', async () => {
    const missing = await get('/v1/models', null);
    expect(missing.status).toBe(401);
    expect(missing.body).toMatchObject({
      status: false,
      error: {
        error_id: 'UNAUTHORIZED',
        http_status: 401,
        type: 'authentication_error',
        code: 'unauthorized',
      },
    });
    expect((await get('/v1/models', 'gty_not-a-real-key')).status).toBe(401);

    const key = addKey(gantry.store, 'test');
    expect((await get('/v1/models', key)).status).toBe(200);
    // The key just created is the newest of account test.
    const account = gantry.store.getAccountByName('test');
    const newest = gantry.store.listKeys(account?.id).at(-1);
    expect(gantry.store.revokeKey(newest?.id ?? '')).toBe(true);
    expect((await get('/v1/models', key)).status).toBe(401);
    await expect(
      new OpenAI({ baseURL: gantry.baseURL, apiKey: key, maxRetries: 0 }).models.list(),
    ).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
  });

  it('answers 401 ACCOUNT_SUSPENDED for a suspended account', async () => {
    const key = addKey(gantry.store, 'sleepy');
    gantry.store.upsertAccount('sleepy', 'default', 'suspended');
    const { status, body } = await get('/v1/models', key);
    expect(status).toBe(401);
    expect(body).toMatchObject({ error: { error_id: 'ACCOUNT_SUSPENDED' } });
  });

  it('records last use off the request path', async () => {
    const key = addKey(gantry.store, 'tracked');
    const account = gantry.store.getAccountByName('tracked');
    expect(gantry.store.listKeys(account?.id)[0]?.lastUsedAt).toBeNull();
    await get('/v1/models', key);
    // Not written by the request itself: only at the next batch.
    expect(gantry.store.listKeys(account?.id)[0]?.lastUsedAt).toBeNull();
    await gantry.app.close();
    expect(gantry.store.listKeys(account?.id)[0]?.lastUsedAt).toMatch(/^\d{4}-\d\d-\d\dT/);
    gantry = await startGantry(LOCAL_CONFIG);
    client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
  });
});

describe('a catalogue longer than a page (30 models)', () => {
  const COUNT = 30;
  const ids = Array.from({ length: COUNT }, (_, i) => `many/model-${String(i + 1).padStart(2, '0')}`);
  let big: TestGantry;
  let bigClient: OpenAI;

  beforeAll(async () => {
    const entries = ids
      .map(
        (id) => `
  - namespace: ${id}
    name: ${id}
    type: text
    vendor: { name: Many, slug: many }
    routes: [{ provider: local, model: local-chat }]`,
      )
      .join('');
    big = await startGantry(`
providers:
  local: { kind: local }
models:${entries}
`);
    bigClient = new OpenAI({ baseURL: big.baseURL, apiKey: big.key, maxRetries: 0 });
  });
  afterAll(() => big?.close());

  const bigGet = async (path: string) => {
    const res = await fetch(big.origin + path, { headers: { 'x-api-key': big.key } });
    expect(res.status).toBe(200);
    return (await res.json()) as {
      data: Array<{ id: string }>;
      models: Array<{ id: string }>;
      has_more: boolean;
    };
  };

  it('the official SDK sees every model, with list() and with auto-pagination', async () => {
    const page = await bigClient.models.list();
    expect(page.data.map((m) => m.id)).toEqual(ids);
    expect(page.hasNextPage()).toBe(false);
    const seen: string[] = [];
    for await (const model of bigClient.models.list()) seen.push(model.id);
    expect(seen).toEqual(ids);
  });

  it('a spec client gets ten per page with has_more, and pages through all of them', async () => {
    const first = await bigGet('/v1/models');
    assertOpenAISchema('ListModelsResponse', first);
    expect(first.models.map((m) => m.id)).toEqual(ids.slice(0, 10));
    expect(first.has_more).toBe(true);
    // The OpenAI list of the same answer is complete.
    expect(first.data.map((m) => m.id)).toEqual(ids);

    const paged: string[] = [];
    for (let offset = 0, more = true; more; offset += 10) {
      const body = await bigGet(`/v1/models?offset=${offset}`);
      expect(body.models.length).toBeLessThanOrEqual(10);
      // Paging explicitly pages both lists alike.
      expect(body.data).toEqual(body.models);
      paged.push(...body.models.map((m) => m.id));
      more = body.has_more;
    }
    expect(paged).toEqual(ids);

    const page3 = await bigGet('/v1/models?page=3&per_page=10');
    expect(page3.models.map((m) => m.id)).toEqual(ids.slice(20, 30));
    expect(page3.has_more).toBe(false);
  });

  it('filters apply to the complete list too', async () => {
    const none = await bigGet('/v1/models?type=image');
    expect(none.data).toEqual([]);
    expect(none.has_more).toBe(false);
  });
});
