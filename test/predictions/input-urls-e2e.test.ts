/**
 * URL file inputs end to end (README, Predictions: file inputs): a real
 * Gantry in front of the fake Cog server, with a file host on 127.0.0.1 (so
 * `predictions.webhooks.allow_private` is on, or the guard would refuse it). Gantry fetches the URL and
 * the backend receives a data: URI; a file over `max_input_file_bytes` fails the prediction without a
 * backend call; the prediction's `input` keeps the URL the caller sent. The guard itself (a name that
 * resolves to loopback, a redirect to a private address) is tested in input-fetch.test.ts, where names
 * can be mapped without DNS.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type FakeCog, startFakeCog } from '../helpers/fake-cog.js';
import { type RecordingServer, startRecordingServer } from '../helpers/fake-server.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';

type Json = Record<string, unknown>;

const PNG = Buffer.from('89504e470d0a1a0a0000000d4948445200000008', 'hex');
const BIG = Buffer.alloc(1_500, 7);

describe('URL file inputs fetched by Gantry', () => {
  let cog: FakeCog;
  let files: RecordingServer<Json>;
  let gantry: TestGantry;

  beforeAll(async () => {
    cog = await startFakeCog();
    files = await startRecordingServer<Json>(
      (ex) => {
        const big = ex.req.url === '/big.bin';
        ex.res.writeHead(200, { 'content-type': big ? 'application/octet-stream' : 'image/png' });
        ex.res.end(big ? BIG : PNG);
      },
      { name: 'file host', behavior: {}, errorBody: (message) => ({ message }) },
    );
    gantry = await startGantry(`
providers:
  cog: { kind: cog, base_url: "${cog.origin}" }
tiers:
  default: {}
predictions:
  concurrency: 1
  max_input_file_bytes: 1000
  webhooks: { allow_private: true }
models:
  - namespace: acme/edit
    name: edit
    type: image
    vendor: { name: Acme, slug: acme }
    serves: [predictions]
    routes: [{ provider: cog }]
    input_schema: { type: object, required: [prompt], properties: {
      prompt: { type: string },
      image: { type: string, format: uri },
      refs: { type: array, items: { type: string, format: uri } } } }
    output_schema: { type: array, items: { type: string, format: uri } }
`);
  });
  afterAll(async () => {
    await gantry?.close();
    await cog?.close();
    await files?.close();
  });
  beforeEach(async () => {
    await cog.idle();
    cog.reset();
    files.reset();
  });

  async function predict(input: Json) {
    const res = await fetch(`${gantry.origin}/v1/predictions`, {
      method: 'POST',
      headers: { 'x-api-key': gantry.key, 'content-type': 'application/json', prefer: 'wait=30' },
      body: JSON.stringify({ model: 'acme/edit', input }),
    });
    return { status: res.status, body: (await res.json()) as Json };
  }
  const creates = () =>
    cog.requests.filter((r) => r.method === 'PUT' || (r.method === 'POST' && r.path === '/predictions'));

  it('sends the backend a data: URI with the bytes and content type; the prediction keeps the URL', async () => {
    const input = {
      prompt: 'x',
      image: `${files.origin}/cat.png`,
      refs: [`${files.origin}/a.png`, 'data:image/png;base64,AAAA'],
    };
    const res = await predict(input);
    expect(res.body.status, JSON.stringify(res.body.error)).toBe('succeeded');
    expect(res.body.input).toEqual(input);

    const png = `data:image/png;base64,${PNG.toString('base64')}`;
    expect(creates()).toHaveLength(1);
    expect(creates()[0]?.body?.input).toEqual({
      prompt: 'x',
      image: png,
      refs: [png, 'data:image/png;base64,AAAA'],
    });
    expect(files.requests.map((r) => r.path)).toEqual(['/cat.png', '/a.png']);
  });

  it('fails the prediction, naming the input, without calling the backend when the file is too large', async () => {
    const res = await predict({ prompt: 'x', refs: [`${files.origin}/a.png`, `${files.origin}/big.bin`] });
    expect(res.body.status).toBe('failed');
    expect(res.body.error).toBe(
      'Could not fetch input refs[1]: the file is larger than the 1000 bytes allowed',
    );
    expect(creates()).toHaveLength(0);
    // Final, not retried as a backend failure: each file was asked for once.
    expect(files.requests.map((r) => r.path)).toEqual(['/a.png', '/big.bin']);
  });

  it('fails the prediction when the URL cannot be fetched, without calling the backend', async () => {
    const res = await predict({ prompt: 'x', image: 'http://gantry-test.invalid/cat.png' });
    expect(res.body.status).toBe('failed');
    expect(res.body.error).toBe('Could not fetch input image: its host does not resolve');
    expect(creates()).toHaveLength(0);
  });
});
