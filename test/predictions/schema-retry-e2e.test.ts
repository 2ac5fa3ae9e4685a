/**
 * A Cog server that cannot give its schemas when Gantry starts (README, Predictions: "A model whose
 * schemas could not be read"): unreachable, or answering /openapi.json with a page that is not JSON or an
 * error status. Gantry starts anyway with only that model offline (the reason shown and logged), keeps
 * asking in the background with backoff, and brings the model online with its schemas once they load.
 */
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeCog, startFakeCog } from '../helpers/fake-cog.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { closedPort } from '../helpers/ports.js';
import { restCall } from '../helpers/rest.js';
import { until } from '../helpers/wait.js';

type Json = Record<string, unknown>;

function model(namespace: string, provider: string): string {
  return `
  - namespace: ${namespace}
    name: ${namespace.split('/')[1]}
    type: image
    vendor: { name: Acme, slug: acme }
    serves: [predictions]
    routes: [{ provider: ${provider} }]`;
}

/** Forwards every request on `port` to `target` (the fake Cog), from the moment it is started. */
async function forwarder(port: number, target: string): Promise<Server> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = chunks.length > 0 ? Buffer.concat(chunks) : undefined;
      const answer = await fetch(target + (req.url ?? '/'), {
        method: req.method ?? 'GET',
        headers: { 'content-type': String(req.headers['content-type'] ?? 'application/json') },
        ...(body && req.method !== 'GET' ? { body } : {}),
      });
      res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'text/plain' });
      res.end(Buffer.from(await answer.arrayBuffer()));
    });
  });
  await new Promise<void>((done) => server.listen(port, '127.0.0.1', done));
  return server;
}

describe('a Cog server whose schemas cannot be read at start', () => {
  let later: FakeCog;
  let starting: FakeCog;
  let served: FakeCog;
  let forward: Server | undefined;
  let port: number;
  let gantry: TestGantry;
  const logs: string[] = [];

  beforeAll(async () => {
    port = await closedPort();
    later = await startFakeCog();
    starting = await startFakeCog({
      openApiAnswers: [
        { status: 200, body: '<html>starting</html>' },
        { status: 404, body: '{"detail":"Not Found"}', contentType: 'application/json' },
      ],
    });
    served = await startFakeCog();
    gantry = await startGantry(
      `
providers:
  down: { kind: cog, base_url: "http://127.0.0.1:${port}" }
  starting: { kind: cog, base_url: "${starting.origin}" }
  served: { kind: cog, base_url: "${served.origin}" }
tiers:
  default: {}
models:${model('acme/down', 'down')}${model('acme/starting', 'starting')}${model('acme/served', 'served')}
`,
      {},
      { onLog: (line) => logs.push(line) },
    );
  });
  afterAll(async () => {
    await gantry?.close();
    await new Promise((done) => (forward ? forward.close(done) : done(undefined)));
    await Promise.all([later?.close(), starting?.close(), served?.close()]);
  });

  const call = (method: string, path: string, body?: unknown) =>
    restCall<Json>(gantry.origin, method, path, { key: gantry.key, body });
  const status = async (slug: string) => (await call('GET', `/v1/models/${slug}`)).body;
  const predict = (slug: string) =>
    call('POST', '/v1/predictions', { model: slug, input: { prompt: 'a fox' }, await: true });

  it('starts with only those models offline, the reason shown and logged, the others served', async () => {
    // Checked at once: the first retry is a second after start.
    const down = await status('acme/down');
    expect(down.status).toBe('offline');
    expect(String(down.status_reason)).toMatch(/^cannot read its schemas from down: .*\(retrying\)$/);
    expect(logs.some((l) => l.includes('model taken offline') && l.includes('acme/down'))).toBe(true);
    const refused = await predict('acme/down');
    expect(refused.status).toBe(403);
    expect((await status('acme/served')).status).toBe('operational');
    expect((await predict('acme/served')).body.status).toBe('succeeded');
  });

  it('brings a model online once its server answers with its schemas (non-JSON, then 404, then served)', async () => {
    await until(
      'acme/starting online',
      async () => (await status('acme/starting')).status === 'operational',
      20_000,
      100,
    );
    const shown = (await call('GET', '/v1/models/acme/starting?fields=input_schema,output_schema')).body;
    expect(shown.status_reason).toBeUndefined();
    expect(Object.keys((shown.input_schema as Json).properties as Json)).toContain('prompt');
    expect((shown.output_schema as Json).type).toBe('array');
    // The document was asked for three times: the HTML page, the 404, the schemas.
    expect(starting.requests.filter((r) => r.path === '/openapi.json')).toHaveLength(3);
    const ok = await predict('acme/starting');
    expect(ok.body.status, JSON.stringify(ok.body)).toBe('succeeded');
    // Its input schema is checked now: an unknown input is refused by name.
    const bad = await call('POST', '/v1/predictions', {
      model: 'acme/starting',
      input: { prompt: 'x', nope: 1 },
    });
    expect(bad.status).toBe(400);
  });

  it("brings an unreachable server's model online once the server is up", async () => {
    forward = await forwarder(port, later.origin);
    await until(
      'acme/down online',
      async () => (await status('acme/down')).status === 'operational',
      20_000,
      100,
    );
    expect((await status('acme/down')).status_reason).toBeUndefined();
    const ok = await predict('acme/down');
    expect(ok.body.status, JSON.stringify(ok.body)).toBe('succeeded');
    expect(later.requests.some((r) => r.method === 'PUT' || r.path === '/predictions')).toBe(true);
    expect(logs.some((l) => l.includes('back online') && l.includes('acme/down'))).toBe(true);
  });
});
