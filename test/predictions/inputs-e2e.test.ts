/**
 * Prediction inputs end to end (README, Predictions: inputs): a real Gantry in front of the fake Cog server
 * (test/helpers/fake-cog.ts), through the HTTP API.
 *
 * - A model whose input schema cannot compile is offline with its reason (GET /v1/models/{slug}
 *   `status_reason`, a log line); the others are served. A repeated enum item is repaired, not fatal.
 * - What the backend receives: pydantic's conversions applied, defaults that break their own schema left
 *   out, unknown inputs refused by name or dropped (`unknown_inputs: drop`) with a log line.
 * - `ge`/`le` bounds refuse with INVALID_INPUT naming the field, before the backend sees anything.
 * - Prefer: wait[=N], Cancel-After (queued: canceled at the deadline, never sent; during a run: canceled), file
 *   inputs (data: URI size, internal URLs; URLs fetched by Gantry: input-urls-e2e.test.ts).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type FakeCog, startFakeCog } from '../helpers/fake-cog.js';
import { predictionModelYaml, startGantry, type TestGantry } from '../helpers/gantry.js';
import { restCall } from '../helpers/rest.js';
import { until } from '../helpers/wait.js';

type Json = Record<string, unknown>;

const URIS = '{ type: array, items: { type: string, format: uri } }';

function model(namespace: string, inputSchema: string, extra = ''): string {
  return predictionModelYaml(
    namespace,
    'cog',
    `
    input_schema: ${inputSchema}
    output_schema: ${URIS}${extra}`,
  );
}

describe('prediction inputs through Gantry and a Cog server', () => {
  let cog: FakeCog;
  let gantry: TestGantry;
  const logs: string[] = [];

  beforeAll(async () => {
    cog = await startFakeCog();
    gantry = await startGantry(
      `
providers:
  cog: { kind: cog, base_url: "${cog.origin}" }
tiers:
  default: {}
predictions:
  concurrency: 1
  max_input_file_bytes: 1000
models:${model('acme/broken', '{ type: object, properties: { code: { type: string, pattern: "^(?P<lang>[a-z]+):" } } }')}${model(
        'acme/repeated',
        '{ type: object, required: [prompt], properties: { prompt: { type: string }, width: { type: integer, enum: [512, 768, 768] } } }',
      )}${model(
        'acme/img',
        `{ type: object, required: [prompt], properties: {
          prompt: { type: string, x-order: 0 },
          num_outputs: { type: integer, ge: 1, le: 4, default: 1, x-order: 1 },
          seed: { type: integer, default: null, x-order: 2 },
          image: { type: string, format: uri, default: clown.webp, x-order: 3 },
          guidance: { type: number, default: 7.5, x-order: 4 },
          go_fast: { type: boolean, default: true, x-order: 5 } } }`,
      )}${model(
        'acme/multi',
        // pydantic v2's (and the Rust server's) Optional[list[Path]] and Optional[Path].
        `{ type: object, required: [prompt], properties: {
          prompt: { type: string, x-order: 0 },
          refs: { anyOf: [{ type: array, items: { type: string, format: uri } }, { type: "null" }], default: null, x-order: 1 },
          mask: { anyOf: [{ type: string, format: uri }, { type: "null" }], default: null, x-order: 2 } } }`,
      )}${model(
        'acme/lenient',
        '{ type: object, required: [prompt], properties: { prompt: { type: string } } }',
        '\n    unknown_inputs: drop',
      )}
`,
      {},
      { onLog: (line) => logs.push(line) },
    );
  });
  afterAll(async () => {
    await gantry?.close();
    await cog?.close();
  });
  beforeEach(async () => {
    await cog.idle();
    cog.reset();
  });

  const call = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    restCall<Json>(gantry.origin, method, path, { key: gantry.key, body, headers });
  /** The prediction creates the Cog server received (not cancels). */
  const creates = () =>
    cog.requests.filter((r) => r.method === 'PUT' || (r.method === 'POST' && r.path === '/predictions'));
  const sentInput = (i = 0) => (creates()[i]?.body?.input ?? undefined) as Json | undefined;

  it('takes only the model whose schema cannot compile offline, with the reason shown and logged', async () => {
    const broken = await call('GET', '/v1/models/acme/broken');
    expect(broken.status).toBe(200);
    expect(broken.body.status).toBe('offline');
    expect(String(broken.body.status_reason)).toMatch(/input schema does not compile/);
    expect(logs.some((l) => l.includes('taken offline') && l.includes('acme/broken'))).toBe(true);

    const refused = await call('POST', '/v1/predictions', { model: 'acme/broken', input: { code: 'py:1' } });
    expect(refused.status).toBeGreaterThanOrEqual(400);
    expect((refused.body.error as Json).details).toMatch(/does not compile/);
    expect(creates()).toHaveLength(0);

    const served = await call('GET', '/v1/models/acme/img');
    expect(served.body.status).toBe('operational');
    expect(served.body.status_reason).toBeUndefined();
  });

  it('repairs a repeated enum item (logged) and serves the model', async () => {
    expect((await call('GET', '/v1/models/acme/repeated')).body.status).toBe('operational');
    expect(logs.some((l) => l.includes('repaired') && l.includes('repeated enum items removed'))).toBe(true);
    const ok = await call('POST', '/v1/predictions', {
      model: 'acme/repeated',
      input: { prompt: 'x', width: 768 },
      await: true,
    });
    expect(ok.body.status, JSON.stringify(ok.body)).toBe('succeeded');
    const bad = await call('POST', '/v1/predictions', {
      model: 'acme/repeated',
      input: { prompt: 'x', width: 700 },
    });
    expect(bad.status).toBe(400);
  });

  it("sends pydantic's conversions and leaves out defaults that break their own schema", async () => {
    const res = await call('POST', '/v1/predictions', {
      model: 'acme/img',
      input: { prompt: 'x', num_outputs: '2', seed: null, go_fast: 'false', guidance: ' 3 ' },
      await: true,
    });
    expect(res.status).toBe(200);
    expect(res.body.status).toBe('succeeded');
    // seed (default null on an integer) and image (a file name on a URI) are the backend's to default.
    const expected = { prompt: 'x', num_outputs: 2, go_fast: false, guidance: 3 };
    expect(sentInput()).toEqual(expected);
    expect(res.body.input).toEqual(expected);
  });

  it('passes exactly the default the schema author set, unchecked and as sent, and shows it', async () => {
    const res = await call('POST', '/v1/predictions', {
      model: 'acme/img',
      input: { prompt: 'x', image: 'clown.webp' },
      await: true,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.status).toBe('succeeded');
    expect(sentInput()?.image).toBe('clown.webp');
    expect((res.body.input as Json).image).toBe('clown.webp');
    const other = await call('POST', '/v1/predictions', {
      model: 'acme/img',
      input: { prompt: 'x', image: 'cat.webp' },
    });
    expect(other.status).toBe(400);
    expect(creates()).toHaveLength(1);
  });

  it('holds an optional list of files (anyOf with null) to the size limit and the address rules, and fetches it', async () => {
    const refused = async (input: Json) => {
      const res = await call('POST', '/v1/predictions', { model: 'acme/multi', input });
      expect(res.status, JSON.stringify(input)).toBe(400);
      return ((res.body.error as Json).details as Json).fields as Array<{ field: string; message: string }>;
    };
    const metadata = await refused({ prompt: 'x', refs: ['http://169.254.169.254/latest/meta-data'] });
    expect(metadata.map((f) => f.field)).toEqual(['refs[0]']);
    expect(metadata[0]?.message).toMatch(/must be a public http\(s\) URL/);
    expect(await refused({ prompt: 'x', mask: 'http://127.0.0.1:8080/m.png' })).toHaveLength(1);
    const big = `data:image/png;base64,${Buffer.alloc(1_200).toString('base64')}`;
    expect(await refused({ prompt: 'x', refs: [big] })).toEqual([
      { field: 'refs[0]', message: 'is a file of 1200 bytes, more than the 1000 allowed' },
    ]);
    expect(creates()).toHaveLength(0);

    // A public-looking URL in the list is fetched by Gantry before the backend is called.
    const pub = await call('POST', '/v1/predictions', {
      model: 'acme/multi',
      input: { prompt: 'x', refs: ['https://gantry-test.invalid/a.png'] },
      await: true,
    });
    expect(pub.body.status).toBe('failed');
    expect(pub.body.error).toMatch(/^Could not fetch input refs\[0\]: /);
    expect(creates()).toHaveLength(0);

    const small = `data:image/png;base64,${Buffer.alloc(300).toString('base64')}`;
    const ok = await call('POST', '/v1/predictions', {
      model: 'acme/multi',
      input: { prompt: 'x', refs: [small], mask: null },
      await: true,
    });
    expect(ok.body.status, JSON.stringify(ok.body)).toBe('succeeded');
    expect(sentInput()?.refs).toEqual([small]);
  });

  it('refuses values outside ge/le, naming the field, before the backend sees them', async () => {
    const res = await call('POST', '/v1/predictions', {
      model: 'acme/img',
      input: { prompt: 'x', num_outputs: 5 },
    });
    expect(res.status).toBe(400);
    const error = res.body.error as Json;
    expect(error.error_id ?? error.code ?? error.type).toBeDefined();
    expect(JSON.stringify(error)).toContain('INVALID_INPUT');
    expect((error.details as Json).fields).toEqual([{ field: 'num_outputs', message: 'must be <= 4' }]);
    expect(creates()).toHaveLength(0);
  });

  it('refuses unknown inputs naming each one, or drops them where the model says so', async () => {
    const refused = await call('POST', '/v1/predictions', {
      model: 'acme/img',
      input: { prompt: 'x', num_output: 2, colour: 'red' },
    });
    expect(refused.status).toBe(400);
    const fields = ((refused.body.error as Json).details as Json).fields as Array<{ field: string }>;
    expect(fields.map((f) => f.field).sort()).toEqual(['colour', 'num_output']);

    const dropped = await call('POST', '/v1/predictions', {
      model: 'acme/lenient',
      input: { prompt: 'x', num_output: 2 },
      await: true,
    });
    expect(dropped.body.status).toBe('succeeded');
    expect(sentInput()).toEqual({ prompt: 'x' });
    const line = logs.find((l) => l.includes('unknown inputs dropped'));
    expect(line).toBeDefined();
    expect(JSON.parse(line as string).dropped).toEqual(['num_output']);
  });

  it('waits with Prefer: wait and Prefer: wait=N, and refuses a malformed one before creating anything', async () => {
    for (const prefer of ['wait', 'wait=5', 'respond-async, wait=10']) {
      const res = await call(
        'POST',
        '/v1/predictions',
        { model: 'acme/img', input: { prompt: 'x' } },
        { prefer },
      );
      expect(res.body.status, prefer).toBe('succeeded');
    }
    const before = creates().length;
    for (const prefer of ['wait=0', 'wait=61', 'wait=abc', 'wait=1.5']) {
      const res = await call(
        'POST',
        '/v1/predictions',
        { model: 'acme/img', input: { prompt: 'x' } },
        { prefer },
      );
      expect(res.status, prefer).toBe(400);
      expect(JSON.stringify(res.body)).toContain('Prefer');
    }
    expect(creates().length).toBe(before);
  });

  it('Prefer: wait=1 answers after about a second with the prediction still running', async () => {
    cog.setBehavior({ stepMs: 600 });
    const started = Date.now();
    const res = await call(
      'POST',
      '/v1/predictions',
      { model: 'acme/img', input: { prompt: 'x' } },
      { prefer: 'wait=1' },
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect(['starting', 'processing']).toContain(res.body.status);
  });

  it('refuses a malformed or too short Cancel-After', async () => {
    for (const value of ['4', '4s', '1x', '5m3h', '-5', 'soon']) {
      const res = await call(
        'POST',
        '/v1/predictions',
        { model: 'acme/img', input: { prompt: 'x' } },
        { 'cancel-after': value },
      );
      expect(res.status, value).toBe(400);
      expect(JSON.stringify(res.body)).toContain('Cancel-After');
    }
  });

  it('passes a data: URI file input on, refuses one over max_input_file_bytes and internal URLs', async () => {
    const small = `data:image/png;base64,${Buffer.alloc(600).toString('base64')}`;
    const ok = await call('POST', '/v1/predictions', {
      model: 'acme/img',
      input: { prompt: 'x', image: small },
      await: true,
    });
    expect(ok.body.status).toBe('succeeded');
    expect(sentInput()?.image).toBe(small);

    const big = `data:image/png;base64,${Buffer.alloc(1_200).toString('base64')}`;
    const tooBig = await call('POST', '/v1/predictions', {
      model: 'acme/img',
      input: { prompt: 'x', image: big },
    });
    expect(tooBig.status).toBe(400);
    expect(((tooBig.body.error as Json).details as Json).fields).toEqual([
      { field: 'image', message: 'is a file of 1200 bytes, more than the 1000 allowed' },
    ]);

    for (const url of [
      'http://169.254.169.254/latest/meta-data',
      'http://127.0.0.1:8080/x.png',
      'http://db.internal/a.png',
    ]) {
      const res = await call('POST', '/v1/predictions', {
        model: 'acme/img',
        input: { prompt: 'x', image: url },
      });
      expect(res.status, url).toBe(400);
    }
    // A host that passes the create-time check is fetched by Gantry when the run starts (with DNS, which
    // `.invalid` never answers): the prediction fails naming the input, the backend is not called.
    const pub = await call('POST', '/v1/predictions', {
      model: 'acme/img',
      input: { prompt: 'x', image: 'https://gantry-test.invalid/cat.png' },
      await: true,
    });
    expect(pub.body.status).toBe('failed');
    expect(pub.body.error).toBe(
      'Could not fetch input image: refused, host gantry-test.invalid does not resolve',
    );
    expect(creates()).toHaveLength(1);
  });
  it('Cancel-After: reached before start ends canceled without running; reached during a run cancels it', async () => {
    // One worker slot: the first prediction runs ~12 s, so the second's 5 s deadline passes in the queue.
    // It is canceled at its deadline, not when a worker gets to it: a client waiting (Prefer: wait)
    // hears `canceled` while the first still runs.
    cog.setBehavior({ stepMs: 2_400 });
    const first = await call('POST', '/v1/predictions', { model: 'acme/img', input: { prompt: 'first' } });
    const queuedAt = Date.now();
    const second = await call(
      'POST',
      '/v1/predictions',
      { model: 'acme/img', input: { prompt: 'second' } },
      { 'cancel-after': '5s', prefer: 'wait=15' },
    );
    expect(second.body.status).toBe('canceled');
    expect(Date.now() - queuedAt).toBeGreaterThanOrEqual(4_900);
    expect(Date.now() - queuedAt).toBeLessThan(9_000);
    const get = async (id: unknown) => (await call('GET', `/v1/predictions/${String(id)}`)).body;
    expect((await get(first.body.id)).status).toBe('processing');
    await until('the first succeeded', async () => (await get(first.body.id)).status === 'succeeded', 20_000);
    expect(creates().map((r) => (r.body?.input as Json | undefined)?.prompt)).toEqual(['first']);

    cog.reset();
    cog.setBehavior({ stepMs: 1_400 });
    const started = Date.now();
    const third = await call(
      'POST',
      '/v1/predictions',
      { model: 'acme/img', input: { prompt: 'third' } },
      { 'cancel-after': '0h0m5s' },
    );
    await until('the third canceled', async () => (await get(third.body.id)).status === 'canceled', 15_000);
    expect(Date.now() - started).toBeGreaterThanOrEqual(4_900);
    expect(creates()).toHaveLength(1);
  }, 50_000);
});
