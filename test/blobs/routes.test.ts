import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalDiskBlobStore } from '../../src/blobs/local.js';
import { parseByteRange, registerBlobRoutes } from '../../src/blobs/routes.js';
import { blobSignature } from '../../src/blobs/signed-url.js';
import type { BlobReader } from '../../src/blobs/types.js';
import { schemasDocumentOnly } from '../../src/openapi/document-only.js';

const SECRET = 'route-tests-secret-0123456789abcdef';
/** A pinned clock, so Cache-Control and expiry are exact. */
const NOW_SECONDS = 1_900_000_000;
const ID = '3f2b9c1e-7a44-4c1e-9d51-0c6b8e2f4a10';
const VIDEO = randomBytes(100_000);
const OUTSIDE_SECRET = 'TOP SECRET: must never be served';

interface Server {
  app: FastifyInstance;
  origin: string;
}

async function startServer(store: BlobReader): Promise<Server> {
  // Close keep-alive sockets too: a client can read the last byte before the server marks it idle.
  const app = Fastify({ logger: false, forceCloseConnections: true });
  schemasDocumentOnly(app);
  registerBlobRoutes(app, { store, secret: SECRET, now: () => NOW_SECONDS * 1000 });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  return { app, origin: `http://127.0.0.1:${port}` };
}

/** A raw request, so paths reach the server exactly as written (fetch would normalise `..`). */
function rawGet(origin: string, requestPath: string): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(origin);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: hostname, port, path: requestPath, method: 'GET' }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** A signed query for any key string, even one the store would refuse to sign. */
function query(key: string, expires = NOW_SECONDS + 600): string {
  return `expires=${expires}&signature=${blobSignature(key, String(expires), SECRET)}`;
}

function expectEnvelope(body: unknown, status: number, errorId: string): void {
  expect(body).toMatchObject({
    status: false,
    response: expect.any(String),
    error: { http_status: status, error_id: errorId, message: expect.any(String) },
  });
}

/** Forged and expired links share FILE_LINK_EXPIRED (the catalogue's choice); the message tells them apart. */
function expectLinkRefused(body: unknown, message: string): void {
  expectEnvelope(body, 403, 'FILE_LINK_EXPIRED');
  expect(body).toMatchObject({ error: { message } });
}

let dir: string;
let store: LocalDiskBlobStore;
let server: Server;
let videoUrl: string;

beforeAll(async () => {
  const parent = await mkdtemp(path.join(tmpdir(), 'gantry-file-routes-'));
  dir = path.join(parent, 'blobs');
  await mkdir(dir);
  // A file beside the store's directory that traversal would reach.
  await writeFile(path.join(parent, 'outside.txt'), OUTSIDE_SECRET);
  let origin = '';
  store = new LocalDiskBlobStore(dir, { secret: SECRET, publicUrl: () => origin });
  server = await startServer(store);
  origin = server.origin;
  await store.put(`${ID}/clip.mp4`, VIDEO, 'video/mp4');
  videoUrl = store.urlFor(`${ID}/clip.mp4`, NOW_SECONDS + 900);
});

afterAll(async () => {
  await server.app.close();
  await rm(path.dirname(dir), { recursive: true, force: true });
});

describe('GET /v1/files/*', () => {
  it('streams the file with type, length, ETag and a private cache lifetime up to the expiry', async () => {
    const res = await fetch(videoUrl);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('video/mp4');
    expect(res.headers.get('content-length')).toBe(String(VIDEO.length));
    expect(res.headers.get('cache-control')).toBe('private, max-age=900');
    expect(res.headers.get('accept-ranges')).toBe('bytes');
    expect(res.headers.get('etag')).toMatch(/^"[A-Za-z0-9_-]+"$/);
    expect(res.headers.get('last-modified')).toBeTruthy();
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(Buffer.from(await res.arrayBuffer()).equals(VIDEO)).toBe(true);
  });

  it('HEAD answers the same headers without a body', async () => {
    const res = await fetch(videoUrl, { method: 'HEAD' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-length')).toBe(String(VIDEO.length));
    expect(res.headers.get('content-type')).toBe('video/mp4');
    expect(await res.text()).toBe('');
  });

  it('answers 304 when the client already has this version', async () => {
    const etag = (await fetch(videoUrl, { method: 'HEAD' })).headers.get('etag')!;
    const res = await fetch(videoUrl, { headers: { 'if-none-match': `"other", ${etag}` } });
    expect(res.status).toBe(304);
    expect(res.headers.get('etag')).toBe(etag);
  });

  it('the ETag changes when the file is replaced', async () => {
    const key = `${ID}/replaced.png`;
    await store.put(key, Buffer.from('one'), 'image/png');
    const url = store.urlFor(key, NOW_SECONDS + 60);
    const first = (await fetch(url, { method: 'HEAD' })).headers.get('etag');
    await store.put(key, Buffer.from('two'), 'image/png');
    const second = (await fetch(url, { method: 'HEAD' })).headers.get('etag');
    expect(second).not.toBe(first);
  });
});

describe('Range requests', () => {
  const range = (value: string, extra: Record<string, string> = {}) =>
    fetch(videoUrl, { headers: { range: value, ...extra } });

  it('serves a closed range with 206 and Content-Range', async () => {
    const res = await range('bytes=0-99');
    expect(res.status).toBe(206);
    expect(res.headers.get('content-range')).toBe(`bytes 0-99/${VIDEO.length}`);
    expect(res.headers.get('content-length')).toBe('100');
    expect(res.headers.get('content-type')).toBe('video/mp4');
    expect(Buffer.from(await res.arrayBuffer()).equals(VIDEO.subarray(0, 100))).toBe(true);
  });

  it('serves an open-ended range (how players seek)', async () => {
    const res = await range('bytes=99000-');
    expect(res.status).toBe(206);
    expect(res.headers.get('content-range')).toBe(`bytes 99000-99999/${VIDEO.length}`);
    expect(Buffer.from(await res.arrayBuffer()).equals(VIDEO.subarray(99_000))).toBe(true);
  });

  it('serves a suffix range', async () => {
    const res = await range('bytes=-500');
    expect(res.status).toBe(206);
    expect(res.headers.get('content-range')).toBe(`bytes 99500-99999/${VIDEO.length}`);
    expect(Buffer.from(await res.arrayBuffer()).equals(VIDEO.subarray(-500))).toBe(true);
  });

  it('clamps a range that runs past the end', async () => {
    const res = await range('bytes=99990-200000');
    expect(res.status).toBe(206);
    expect(res.headers.get('content-range')).toBe(`bytes 99990-99999/${VIDEO.length}`);
    expect((await res.arrayBuffer()).byteLength).toBe(10);
  });

  it('answers 416 for a range beyond the end, with the size', async () => {
    const res = await range(`bytes=${VIDEO.length}-`);
    expect(res.status).toBe(416);
    expect(res.headers.get('content-range')).toBe(`bytes */${VIDEO.length}`);
    expectEnvelope(await res.json(), 416, 'RANGE_NOT_SATISFIABLE');
  });

  it('sends the whole file for several ranges or a malformed one', async () => {
    for (const value of ['bytes=0-1,5-6', 'bytes=5-1', 'items=0-5', 'bytes=abc']) {
      const res = await range(value);
      expect(res.status, value).toBe(200);
      expect((await res.arrayBuffer()).byteLength).toBe(VIDEO.length);
    }
  });

  it('honours If-Range: the range for the same version, everything for another', async () => {
    const etag = (await fetch(videoUrl, { method: 'HEAD' })).headers.get('etag')!;
    const same = await range('bytes=0-9', { 'if-range': etag });
    expect(same.status).toBe(206);
    await same.arrayBuffer();
    const other = await range('bytes=0-9', { 'if-range': '"stale"' });
    expect(other.status).toBe(200);
    expect((await other.arrayBuffer()).byteLength).toBe(VIDEO.length);
  });

  it('parseByteRange covers the RFC 9110 forms', () => {
    expect(parseByteRange('bytes=0-0', 10)).toEqual({ start: 0, end: 0 });
    expect(parseByteRange('bytes=-20', 10)).toEqual({ start: 0, end: 9 });
    expect(parseByteRange('bytes=-0', 10)).toBe('unsatisfiable');
    expect(parseByteRange('bytes=0-', 0)).toBe('unsatisfiable');
    expect(parseByteRange('bytes=-5', 0)).toBe('unsatisfiable');
    expect(parseByteRange('bytes=-', 10)).toBeNull();
    expect(parseByteRange('BYTES=2-3', 10)).toEqual({ start: 2, end: 3 });
  });
});

describe('signature checks', () => {
  it('403 invalid link for a tampered signature', async () => {
    const url = new URL(videoUrl);
    const signature = url.searchParams.get('signature')!;
    url.searchParams.set(
      'signature',
      signature.replace(/^./, (c) => (c === 'A' ? 'B' : 'A')),
    );
    const res = await fetch(url);
    expect(res.status).toBe(403);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expectLinkRefused(await res.json(), 'The file link is not valid');
  });

  it('403 invalid link when the expiry was pushed back (not "expired")', async () => {
    const url = new URL(videoUrl);
    url.searchParams.set('expires', String(NOW_SECONDS + 999_999));
    const res = await fetch(url);
    expectLinkRefused(await res.json(), 'The file link is not valid');
  });

  it('403 invalid link without a signature, or with repeated parameters', async () => {
    const bare = `${server.origin}/v1/files/${ID}/clip.mp4`;
    const signed = new URL(videoUrl);
    for (const url of [
      bare,
      `${bare}?expires=${NOW_SECONDS + 900}`,
      `${signed.href}&signature=${signed.searchParams.get('signature')}`,
    ]) {
      const res = await fetch(url);
      expect(res.status, url).toBe(403);
      expectLinkRefused(await res.json(), 'The file link is not valid');
    }
  });

  it('403 expired link for a genuine link past its expiry', async () => {
    const res = await fetch(store.urlFor(`${ID}/clip.mp4`, NOW_SECONDS));
    expect(res.status).toBe(403);
    expectLinkRefused(await res.json(), 'The file link has expired');
  });

  it('checks the signature before saying whether a file exists', async () => {
    const res = await fetch(
      `${server.origin}/v1/files/${ID}/nothing-here.png?expires=1&signature=${'A'.repeat(43)}`,
    );
    expect(res.status).toBe(403);
  });
});

describe('purged files', () => {
  it('404 FILE_NOT_FOUND once a prediction is purged, with no path in the body', async () => {
    const id = 'purge-me';
    await store.put(`${id}/out.png`, randomBytes(64), 'image/png');
    const url = store.urlFor(`${id}/out.png`, NOW_SECONDS + 600);
    expect((await fetch(url, { method: 'HEAD' })).status).toBe(200);
    expect(await store.deletePrefix(id)).toBe(1);
    const res = await fetch(url);
    expect(res.status).toBe(404);
    const text = await res.text();
    expectEnvelope(JSON.parse(text), 404, 'FILE_NOT_FOUND');
    expect(text).not.toContain(dir);
    expect(text).not.toContain(tmpdir());
  });
});

describe('path traversal', () => {
  const attempts = [
    '/v1/files/../outside.txt',
    '/v1/files/../../outside.txt',
    `/v1/files/${ID}/../../outside.txt`,
    '/v1/files/%2e%2e/outside.txt',
    '/v1/files/%2E%2E%2Foutside.txt',
    `/v1/files/${ID}/..%2f..%2foutside.txt`,
    '/v1/files/%252e%252e/outside.txt',
    '/v1/files//etc/passwd',
    '/v1/files/%2Fetc%2Fpasswd',
    '/v1/files/..%5coutside.txt',
    `/v1/files/${ID}/.clip.mp4.meta.json`,
    '/v1/files/',
  ];
  for (const attempt of attempts) {
    it(`refuses ${attempt}`, async () => {
      // Signed for the decoded key as well, so refusal cannot rest on the signature alone.
      const decoded = decodeURIComponent(attempt.replace('/v1/files/', ''));
      const { status, body } = await rawGet(server.origin, `${attempt}?${query(decoded)}`);
      expect(status).toBe(400);
      expect(body).not.toContain('TOP SECRET');
      expect(body).not.toContain('root:');
      expect(body).not.toContain('video/mp4');
      expect(body).not.toContain(dir);
    });
  }

  it('an invalid path is a 400 INVALID_REQUEST in the REST envelope', async () => {
    const { status, body } = await rawGet(
      server.origin,
      `/v1/files/%2e%2e/outside.txt?${query('../outside.txt')}`,
    );
    expect(status).toBe(400);
    expectEnvelope(JSON.parse(body), 400, 'INVALID_REQUEST');
  });
});

describe('failures inside the store', () => {
  it('500 INTERNAL_ERROR without the message, path or stack', async () => {
    const failing = await startServer({
      open: async () => {
        throw new Error(`EIO: i/o error, open '${dir}/secret/path'`);
      },
    });
    try {
      const res = await fetch(`${failing.origin}/v1/files/${ID}/clip.mp4?${query(`${ID}/clip.mp4`)}`);
      expect(res.status).toBe(500);
      const text = await res.text();
      expectEnvelope(JSON.parse(text), 500, 'INTERNAL_ERROR');
      expect(text).not.toContain(dir);
      expect(text).not.toContain('EIO');
      expect(text).not.toContain('at ');
    } finally {
      await failing.app.close();
    }
  });
});
