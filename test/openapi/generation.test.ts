import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import type { Gantry } from '../../src/context.js';
import { registerOpenApi } from '../../src/openapi/routes.js';

type Operation = {
  operationId?: string;
  security?: unknown;
  parameters?: Array<{ name: string; in: string }>;
};

let app: FastifyInstance | undefined;
afterEach(() => app?.close());

/** A bare fastify with the document's plugin and the routes `add` registers after it, as app.ts orders them. */
async function documentOf(add: (app: FastifyInstance) => void, publicUrl?: string) {
  await app?.close();
  app = Fastify();
  app.setValidatorCompiler(() => () => true);
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  await registerOpenApi(app, { config: { server: { publicUrl } } } as unknown as Gantry);
  add(app);
  const res = await app.inject({ url: '/v1/openapi.json' });
  expect(res.statusCode).toBe(200);
  return res.json() as { servers?: unknown; paths: Record<string, Record<string, Operation>> };
}

const documented = { summary: 's', tags: ['admin'], response: { 200: { type: 'object' } } };

describe('the generated document', () => {
  it('gives a route without an operationId one from its method and path, unique per method', async () => {
    const doc = await documentOf((a) => {
      a.get('/admin/v1/things/:id', { schema: documented }, async () => ({}));
      a.route({
        method: ['DELETE', 'POST'],
        url: '/v1/things/:id/delete',
        schema: { ...documented, operationId: 'deleteThing' },
        handler: async () => ({}),
      });
    });
    expect(doc.paths['/admin/v1/things/{id}']?.get?.operationId).toBe('get_admin_v1_things_id');
    expect(doc.paths['/v1/things/{id}/delete']?.delete?.operationId).toBe('deleteThing');
    expect(doc.paths['/v1/things/{id}/delete']?.post?.operationId).toBe('deleteThing-post');
  });

  it('adds the error envelope of the URL to a route that documents no error answers', async () => {
    const doc = await documentOf((a) => {
      a.get('/admin/v1/things', { schema: documented }, async () => ({}));
      a.post('/v1/chat/things', { schema: documented }, async () => ({}));
    });
    type Responses = Record<string, { content?: Record<string, { schema?: unknown }> }>;
    const envelope = (path: string, method: string, status: string) => {
      const operation = doc.paths[path]?.[method] as { responses?: Responses } | undefined;
      return operation?.responses?.[status]?.content?.['application/json']?.schema;
    };
    for (const status of ['4XX', '5XX']) {
      expect(envelope('/admin/v1/things', 'get', status)).toEqual({ $ref: '#/components/schemas/RestError' });
      expect(envelope('/v1/chat/things', 'post', status)).toEqual({
        $ref: '#/components/schemas/InferenceError',
      });
    }
  });

  it('says who may call a route from its URL unless the schema says', async () => {
    const doc = await documentOf((a) => {
      a.get('/admin/v1/things', { schema: documented }, async () => ({}));
      a.get('/v1/things', { schema: documented }, async () => ({}));
      a.get('/v1/open', { schema: { ...documented, security: [] } }, async () => ({}));
      a.get('/elsewhere', { schema: documented }, async () => ({}));
    });
    expect(doc.paths['/admin/v1/things']?.get?.security).toEqual([{ adminKey: [] }, { consoleSession: [] }]);
    expect(doc.paths['/v1/things']?.get?.security).toEqual([
      { bearerKey: [] },
      { apiKeyHeader: [] },
      { consoleSession: [] },
    ]);
    expect(doc.paths['/v1/open']?.get?.security).toEqual([]);
    expect(doc.paths['/elsewhere']?.get?.security).toEqual([]);
  });

  it('names a wildcard after its one path parameter, and hides hidden routes', async () => {
    const doc = await documentOf((a) => {
      a.get(
        '/v1/blobs/*',
        { schema: { ...documented, params: { type: 'object', properties: { key: { type: 'string' } } } } },
        async () => ({}),
      );
      a.post('/internal/x', { schema: { hide: true } }, async () => ({}));
    });
    const operation = doc.paths['/v1/blobs/{key}']?.get;
    expect(operation?.parameters).toEqual([expect.objectContaining({ name: 'key', in: 'path' })]);
    expect(Object.keys(doc.paths)).not.toContain('/internal/x');
  });

  it('lists the configured public URL as the server', async () => {
    const doc = await documentOf(() => {}, 'https://api.example.com/');
    expect(doc.servers).toEqual([{ url: 'https://api.example.com' }]);
    const relative = await documentOf(() => {});
    expect(relative.servers).toBeUndefined();
  });
});
