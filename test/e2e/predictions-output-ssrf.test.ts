/**
 * A prediction backend names its output files by URL and Gantry downloads them into its file store. The
 * URL is the backend's choice: without a guard, a backend could make Gantry fetch a loopback page (an
 * admin console, a metadata service) and serve it to the caller as an output. A URL is a file only
 * where the output schema says `format: uri` or on the backend's own origin; `allow_private_outputs`
 * exempts that origin alone. Real Gantry, fake Cog servers returning loopback URLs, a "secret" page on
 * 127.0.0.1.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeCog, startFakeCog } from '../helpers/fake-cog.js';
import { type RecordingServer, startRecordingServer } from '../helpers/fake-server.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { waitFor } from '../helpers/wait.js';

type Json = Record<string, unknown>;

let cog: FakeCog;
/** A Cog whose Output schema is an object: `result.files` are URIs, any other key says nothing. */
let objects: FakeCog;
let secret: RecordingServer<Record<string, never>>;
let gantry: TestGantry;

const model = (namespace: string, provider: string) => `
  - namespace: ${namespace}
    name: ${namespace}
    type: image
    serves: [predictions]
    routes: [{ provider: ${provider} }]
    input_schema: { type: object, properties: { prompt: { type: string } } }
    output_schema: { type: array, items: { type: string, format: uri } }`;

beforeAll(async () => {
  secret = await startRecordingServer<Record<string, never>>(
    (ex) => {
      ex.res.writeHead(200, { 'content-type': 'text/plain' });
      ex.res.end('internal admin page');
    },
    { name: 'loopback page', behavior: {}, errorBody: (message) => ({ message }) },
  );
  cog = await startFakeCog();
  cog.setBehavior({ output: [`${secret.origin}/admin/report.txt`] });
  objects = await startFakeCog({
    outputSchema: {
      title: 'Output',
      type: 'object',
      properties: {
        result: {
          type: 'object',
          properties: { files: { type: 'array', items: { type: 'string', format: 'uri' } } },
        },
        seed: { type: 'integer' },
      },
    },
  });
  gantry = await startGantry(`
providers:
  cog: { kind: cog, base_url: "${cog.origin}" }
  cog-lan: { kind: cog, base_url: "${cog.origin}", allow_private_outputs: true }
  cog-objects: { kind: cog, base_url: "${objects.origin}" }
tiers:
  default: {}
predictions:
  max_attempts: 1
models:${model('acme/public', 'cog')}${model('acme/lan', 'cog-lan')}${model('acme/objects', 'cog-objects')}
`);
});
afterAll(async () => {
  await gantry?.close();
  await cog?.close();
  await objects?.close();
  await secret?.close();
});

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> {
  const res = await fetch(gantry.origin + path, {
    method,
    headers: {
      'x-api-key': gantry.key,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: (await res.json()) as Json };
}

async function run(modelName: string): Promise<Json> {
  const created = await call('POST', '/v1/predictions', { model: modelName, input: { prompt: 'x' } });
  expect(created.status).toBe(200);
  const id = String(created.body.id);
  return waitFor(`prediction ${id} to end`, async () => {
    const { body } = await call('GET', `/v1/predictions/${id}`);
    return ['succeeded', 'failed', 'canceled'].includes(String(body.status)) ? body : undefined;
  });
}

describe('output URLs of a prediction backend', () => {
  it('are not downloaded from a loopback address: the prediction fails and the page is never fetched', async () => {
    const prediction = await run('acme/public');
    expect(prediction.status).toBe('failed');
    expect(String(prediction.error)).toMatch(
      /Could not download output 0: refused, address 127\.0\.0\.1 is loopback/,
    );
    expect(prediction.output ?? null).toBeNull();
    expect(secret.requests).toHaveLength(0);
  });

  it('are not downloaded from a loopback address wherever the schema places a URI (nested in an object)', async () => {
    objects.setBehavior({ output: { result: { files: [`${secret.origin}/admin/nested.txt`] }, seed: 1 } });
    const prediction = await run('acme/objects');
    expect(prediction.status).toBe('failed');
    expect(String(prediction.error)).toMatch(
      /Could not download output 0: refused, address 127\.0\.0\.1 is loopback/,
    );
    expect(secret.requests).toHaveLength(0);
  });

  it('stay text where the schema says nothing and the URL is not the backend’s (a URL the model echoed)', async () => {
    const echoed = {
      result: { files: [] },
      note: `${secret.origin}/admin/echoed.txt`,
      metadata: 'http://169.254.169.254/latest/meta-data/',
    };
    objects.setBehavior({ output: echoed });
    const prediction = await run('acme/objects');
    expect(prediction.status).toBe('succeeded');
    expect(prediction.output).toEqual(echoed);
    expect((prediction.metadata as { storage: { files: unknown[] } }).storage.files).toEqual([]);
    expect(secret.requests).toHaveLength(0);
  });

  it('are refused on another private address even when the provider allows private outputs', async () => {
    const prediction = await run('acme/lan');
    expect(prediction.status).toBe('failed');
    expect(String(prediction.error)).toMatch(
      /Could not download output 0: refused, address 127\.0\.0\.1 is loopback/,
    );
    expect(secret.requests).toHaveLength(0);
  });

  it('are downloaded from the backend’s own private origin when the provider allows private outputs', async () => {
    cog.setBehavior({ output: [`${cog.origin}/openapi.json`] });
    try {
      const prediction = await run('acme/lan');
      expect(prediction.status).toBe('succeeded');
      const output = prediction.output as string[];
      expect(output).toHaveLength(1);
      const file = await fetch(output[0] ?? '');
      expect(((await file.json()) as { openapi?: string }).openapi).toMatch(/^3\./);
      // Without allow_private_outputs the same URL on the same (loopback) Cog is refused.
      const guarded = await run('acme/public');
      expect(guarded.status).toBe('failed');
      expect(String(guarded.error)).toMatch(/refused, address 127\.0\.0\.1 is loopback/);
    } finally {
      cog.setBehavior({ output: [`${secret.origin}/admin/report.txt`] });
    }
  });
});
