import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { syncAccounts } from '../../src/bootstrap.js';
import { parseConfig } from '../../src/config/load.js';
import { envelopeFor } from '../../src/errors.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { addKey, LOCAL_CONFIG } from '../helpers/gantry.js';

type Json = Record<string, unknown>;
type Operation = { summary?: string; operationId?: string; responses?: Record<string, Json> };
type Built = Awaited<ReturnType<typeof buildApp>>;

let built: Built;
let store: SqliteStore;
let dataDir: string;
let origin: string;
let key: string;
let doc: Json;

// A started Gantry built here rather than by startGantry, for buildApp's list of every route registered.
beforeAll(async () => {
  // E-mail set up, for the subscription routes (nothing is sent: no one subscribes here).
  const yaml = `${LOCAL_CONFIG}\nstatus_page:\n  email: { smtp_url: 'smtp://127.0.0.1:1', from: 'status@gantry.test' }\n`;
  const config = parseConfig(yaml, 'test-config.yaml', {});
  config.server.port = 0;
  config.server.host = '127.0.0.1';
  dataDir = mkdtempSync(join(tmpdir(), 'gantry-openapi-'));
  config.server.dataDir = dataDir;
  config.predictions.filesDir = join(dataDir, 'files');
  store = new SqliteStore(':memory:');
  syncAccounts(store, config);
  key = addKey(store, 'test');
  built = await buildApp(config, store, { logger: false, processMetrics: false });
  await built.app.listen({ host: '127.0.0.1', port: 0 });
  origin = `http://127.0.0.1:${(built.app.server.address() as AddressInfo).port}`;
  const res = await fetch(`${origin}/v1/openapi.json`);
  doc = (await res.json()) as Json;
});
afterAll(async () => {
  await built.app.close();
  store.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const paths = (): Record<string, Record<string, Operation>> =>
  doc.paths as Record<string, Record<string, Operation>>;

/** A fastify URL as the document writes it: `:id` → `{id}`, a wildcard → its named parameter. */
function documentedPath(url: string): string | undefined {
  const templated = url.replace(/:(\w+)/g, '{$1}');
  if (!templated.endsWith('*')) return templated;
  const prefix = templated.slice(0, -1);
  return Object.keys(paths()).find((p) => p.startsWith(prefix) && /^\{\w+\}$/.test(p.slice(prefix.length)));
}

/** A concrete URL that reaches the route. */
function concrete(url: string): string {
  return url.replace(/:(\w+)/g, 'x').replace(/\*$/, 'x/y');
}

function contentSchema(operation: Operation, status: string, mediaType = 'application/json'): Json {
  const response = operation.responses?.[status] as
    | { content?: Record<string, { schema?: Json }> }
    | undefined;
  const schema = response?.content?.[mediaType]?.schema;
  if (schema === undefined) throw new Error(`no ${mediaType} schema for ${status}`);
  // Shared schemas (the error envelopes) are references into components.schemas.
  const ref = schema.$ref;
  if (typeof ref !== 'string') return schema;
  const shared = ((doc.components as Json).schemas as Record<string, Json>)[ref.split('/').pop() as string];
  if (shared === undefined) throw new Error(`${ref} is not in the document`);
  return shared;
}

function validatorFor(schema: Json) {
  return new Ajv2020({ strict: false, validateFormats: false }).compile(schema);
}

describe('GET /v1/openapi.json', () => {
  it('answers without a key, cacheable, with an ETag that revalidates', async () => {
    const res = await fetch(`${origin}/v1/openapi.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.headers.get('cache-control')).toMatch(/public, max-age=\d+/);
    const etag = res.headers.get('etag');
    expect(etag).toMatch(/^".+"$/);
    await res.arrayBuffer();
    const again = await fetch(`${origin}/v1/openapi.json`, { headers: { 'if-none-match': etag as string } });
    expect(again.status).toBe(304);
    expect(again.headers.get('etag')).toBe(etag);
  });

  it('is a valid OpenAPI 3.1 document', async () => {
    expect(doc.openapi).toBe('3.1.0');
    const result = await new Validator().validate(structuredClone(doc));
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    const schemes = (doc.components as Json).securitySchemes as Json;
    expect(Object.keys(schemes)).toEqual(expect.arrayContaining(['bearerKey', 'adminKey', 'consoleSession']));
  });

  it('has unique operationIds', () => {
    const ids = Object.values(paths()).flatMap((ops) => Object.values(ops).map((op) => op.operationId));
    expect(ids.every((id) => typeof id === 'string')).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
  });

  // This test keeps new routes documented: a route without a schema (summary, responses) fails it.
  it('documents every route fastify registered, but the internal ones and the 405 answers', async () => {
    const undocumented: string[] = [];
    const checked = new Set<string>();
    for (const { method, url } of built.routes) {
      if (method === 'HEAD' || url.startsWith('/internal/')) continue;
      const path = documentedPath(url);
      const operation = path === undefined ? undefined : paths()[path]?.[method.toLowerCase()];
      if (operation === undefined) {
        // Left out of the document on purpose only when it is another method's 405 (rejectOtherMethods).
        const res = await built.app.inject({ method, url: concrete(url), headers: { 'x-api-key': key } });
        if (res.statusCode !== 405) undocumented.push(`${method} ${url} (${res.statusCode})`);
        continue;
      }
      checked.add(`${method} ${url}`);
      if (!operation.summary) undocumented.push(`${method} ${url}: no summary`);
      const responses = Object.values(operation.responses ?? {}) as Array<{ content?: Json }>;
      if (!responses.some((r) => r.content !== undefined))
        undocumented.push(`${method} ${url}: no response schema`);
    }
    expect(undocumented).toEqual([]);
    for (const route of [
      'GET /v1/models',
      'GET /v1/models/*',
      'POST /v1/chat/completions',
      'POST /v1/responses',
      'GET /v1/responses/:id',
      'DELETE /v1/responses/:id',
      'GET /v1/responses/:id/input_items',
      'POST /v1/embeddings',
      'POST /v1/predictions',
      'GET /v1/predictions/:id/stream',
      'POST /v1/predictions/:id/cancel',
      'GET /v1/files/*',
      'GET /status',
      'GET /status.json',
      'GET /status/feed.atom',
      'POST /status/subscribe',
      'GET /status/subscribe/confirm',
      'POST /status/unsubscribe',
      'GET /healthz',
      'GET /metrics',
      'POST /admin/v1/session',
      'GET /v1/openapi.json',
    ]) {
      expect(checked, route).toContain(route);
    }
    expect(Object.keys(paths()).some((p) => p.startsWith('/internal'))).toBe(false);
  });

  it('names the error envelope each route really answers in', () => {
    for (const [path, operations] of Object.entries(paths())) {
      for (const [method, operation] of Object.entries(operations)) {
        const expected = envelopeFor(path) === 'inference' ? 'InferenceError' : 'RestError';
        for (const status of ['4XX', '5XX']) {
          const ref = contentSchema(operation, status).title;
          expect(ref, `${method} ${path} ${status}`).toBe(expected);
        }
      }
    }
  });

  it('says who may call each route', () => {
    const security = (path: string, method: string) =>
      (paths()[path]?.[method] as { security?: unknown } | undefined)?.security;
    expect(security('/v1/chat/completions', 'post')).toEqual([
      { bearerKey: [] },
      { apiKeyHeader: [] },
      { consoleSession: [] },
    ]);
    expect(security('/v1/openapi.json', 'get')).toEqual([]);
    expect(security('/status.json', 'get')).toEqual([]);
    expect(security('/v1/files/{path}', 'get')).toEqual([]);
    expect(security('/admin/v1/session', 'post')).toEqual([]);
  });
});

describe('real answers validate against the document', () => {
  const get = async (path: string) => {
    const res = await fetch(origin + path, { headers: { 'x-api-key': key } });
    return { status: res.status, body: (await res.json()) as unknown };
  };
  const post = async (path: string, body: unknown) => {
    const res = await fetch(origin + path, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as unknown };
  };
  const expectValid = (path: string, method: string, status: string, body: unknown) => {
    const validate = validatorFor(contentSchema(paths()[path]?.[method] as Operation, status));
    const ok = validate(body);
    expect(validate.errors ?? []).toEqual([]);
    expect(ok).toBe(true);
  };

  it('GET /v1/models and GET /v1/models/{slug}', async () => {
    const list = await get('/v1/models');
    expect(list.status).toBe(200);
    expectValid('/v1/models', 'get', '200', list.body);
    const one = await get('/v1/models/gantry%2Flocal-chat?fields=input_schema');
    expect(one.status).toBe(200);
    expectValid('/v1/models/{slug}', 'get', '200', one.body);
    const missing = await get('/v1/models/nope/nothing');
    expect(missing.status).toBe(404);
    expectValid('/v1/models/{slug}', 'get', '4XX', missing.body);
  });

  it('POST /v1/chat/completions and its errors', async () => {
    const chat = await post('/v1/chat/completions', {
      model: 'gantry/local-chat',
      messages: [{ role: 'user', content: 'Hello' }],
      max_tokens: 8,
    });
    expect(chat.status).toBe(200);
    expectValid('/v1/chat/completions', 'post', '200', chat.body);
    const streamed = await fetch(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'gantry/local-chat',
        messages: [{ role: 'user', content: 'Hello' }],
        max_tokens: 8,
        stream: true,
      }),
    });
    expect(streamed.status).toBe(200);
    expect(await streamed.text()).toContain('data: [DONE]');
    const media = (streamed.headers.get('content-type') ?? '').split(';')[0] as string;
    const chatOperation = paths()['/v1/chat/completions']?.post as Operation;
    const ok = chatOperation.responses?.['200'] as { content?: Json } | undefined;
    const content = ok?.content ?? {};
    expect(Object.keys(content)).toContain(media);
    const bad = await post('/v1/chat/completions', { model: 'gantry/local-chat', messages: [] });
    expect(bad.status).toBe(400);
    expectValid('/v1/chat/completions', 'post', '4XX', bad.body);
  });

  it('POST /v1/embeddings', async () => {
    const res = await post('/v1/embeddings', { model: 'gantry/local-embed', input: 'Hello' });
    expect(res.status).toBe(200);
    expectValid('/v1/embeddings', 'post', '200', res.body);
  });

  it('the Responses API: create, get, input_items, delete', async () => {
    const created = await post('/v1/responses', {
      model: 'gantry/local-chat',
      input: 'Hello',
      max_output_tokens: 8,
    });
    expect(created.status).toBe(200);
    expectValid('/v1/responses', 'post', '200', created.body);
    const id = (created.body as { id: string }).id;
    const stored = await get(`/v1/responses/${id}`);
    expect(stored.status).toBe(200);
    expectValid('/v1/responses/{id}', 'get', '200', stored.body);
    const items = await get(`/v1/responses/${id}/input_items`);
    expect(items.status).toBe(200);
    expectValid('/v1/responses/{id}/input_items', 'get', '200', items.body);
    const res = await fetch(`${origin}/v1/responses/${id}`, {
      method: 'DELETE',
      headers: { 'x-api-key': key },
    });
    expect(res.status).toBe(200);
    expectValid('/v1/responses/{id}', 'delete', '200', await res.json());
    const gone = await get(`/v1/responses/${id}`);
    expect(gone.status).toBe(404);
    expectValid('/v1/responses/{id}', 'get', '4XX', gone.body);
  });

  it('a prediction, the predictions list, a missing prediction and the webhook secret', async () => {
    const created = await post('/v1/predictions', { model: 'acme/image-gen', input: { prompt: 'a cat' } });
    expect(created.status).toBe(200);
    expectValid('/v1/predictions', 'post', '200', created.body);
    const list = await get('/v1/predictions');
    expect((list.body as { data: unknown[] }).data).toHaveLength(1);
    expect(list.status).toBe(200);
    expectValid('/v1/predictions', 'get', '200', list.body);
    const missing = await get('/v1/predictions/nope');
    expect(missing.status).toBe(404);
    expectValid('/v1/predictions/{id}', 'get', '4XX', missing.body);
    const secret = await get('/v1/webhooks/secret');
    expect(secret.status).toBe(200);
    expectValid('/v1/webhooks/secret', 'get', '200', secret.body);
  });

  it('the status page, /healthz and the session refusal', async () => {
    const status = await get('/status.json');
    expect(status.status).toBe(200);
    expectValid('/status.json', 'get', '200', status.body);
    const health = await get('/healthz');
    expectValid('/healthz', 'get', '200', health.body);
    const session = await get('/admin/v1/session');
    expect(session.status).toBe(401);
    expectValid('/admin/v1/session', 'get', '4XX', session.body);
  });

  it('tells one envelope from the other', async () => {
    const missing = await get('/v1/models/nope/nothing');
    const validate = validatorFor(contentSchema(paths()['/v1/chat/completions']?.post as Operation, '4XX'));
    expect(validate(missing.body)).toBe(false);
  });
});
