import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { LocalDiskBlobStore } from '../../src/blobs/local.js';
import { registerBlobRoutes } from '../../src/blobs/routes.js';
import { S3BlobStore } from '../../src/blobs/s3.js';
import type { BlobStore } from '../../src/blobs/types.js';
import { schemasDocumentOnly } from '../../src/openapi/document-only.js';
import { startFakeS3 } from '../helpers/fake-s3.js';

/** A store under test whose URLs can be fetched over real HTTP. */
interface Subject {
  store: BlobStore;
  close(): Promise<void>;
}

interface Harness {
  name: string;
  create(): Promise<Subject>;
}

const SECRET = 'contract-suite-secret-0123456789';

/** LocalDiskBlobStore in a temporary directory, behind the file routes on a random port. */
function localHarness(): Harness {
  return {
    name: 'LocalDiskBlobStore',
    async create() {
      const dir = await mkdtemp(path.join(tmpdir(), 'gantry-blobs-'));
      // The port, and so the public URL, is known only once the routes' server listens.
      let origin = '';
      const store = new LocalDiskBlobStore(dir, { secret: SECRET, publicUrl: () => origin });
      // Close keep-alive sockets too: a client can read the last byte before the server marks it idle.
      const app = Fastify({ logger: false, forceCloseConnections: true });
      schemasDocumentOnly(app);
      registerBlobRoutes(app, { store, secret: SECRET });
      await app.listen({ host: '127.0.0.1', port: 0 });
      const { port } = app.server.address() as AddressInfo;
      origin = `http://127.0.0.1:${port}`;
      return {
        store,
        async close() {
          await store.close();
          await app.close();
          await rm(dir, { recursive: true, force: true });
        },
      };
    },
  };
}

/** S3BlobStore on a fake S3 that verifies SigV4, under a key prefix; its URLs are pre-signed S3 URLs. */
function s3Harness(): Harness {
  return {
    name: 'S3BlobStore',
    async create() {
      const s3 = await startFakeS3();
      const store = new S3BlobStore({
        endpoint: s3.origin,
        region: s3.region,
        bucket: s3.bucket,
        accessKeyId: s3.accessKeyId,
        secretAccessKey: s3.secretAccessKey,
        forcePathStyle: true,
        prefix: 'gantry/outputs',
      });
      return {
        store,
        async close() {
          await store.close();
          await s3.close();
        },
      };
    },
  };
}

const inAnHour = () => Math.floor(Date.now() / 1000) + 3600;

/** Bytes that start like a PNG and then are random, so nothing can pass by accident. */
function pngLike(size: number): Buffer {
  const header = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([header, randomBytes(size - header.length)]);
}

/** The same behaviour, whichever BlobStore holds the files. */
function contract(h: Harness): void {
  let subject: Subject | undefined;
  const create = async () => {
    subject = await h.create();
    return subject.store;
  };
  afterEach(async () => {
    await subject?.close();
    subject = undefined;
  });

  it('stores bytes and serves them back at the signed URL with their MIME type', async () => {
    const store = await create();
    const id = randomUUID();
    const data = pngLike(300_000);
    const stored = await store.put(`${id}/output_0.png`, data, 'image/png');
    expect(stored).toEqual({ key: `${id}/output_0.png`, size: data.length, contentType: 'image/png' });

    const res = await fetch(await store.urlFor(stored.key, inAnHour()));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('image/png');
    expect(res.headers.get('content-length')).toBe(String(data.length));
    expect(Buffer.from(await res.arrayBuffer()).equals(data)).toBe(true);
  });

  it('keeps audio and video types and an empty file intact', async () => {
    const store = await create();
    const id = randomUUID();
    const files = [
      { name: 'speech.mp3', type: 'audio/mpeg', data: randomBytes(4096) },
      { name: 'clip.mp4', type: 'video/mp4', data: randomBytes(70_000) },
      { name: 'empty.txt', type: 'text/plain; charset=utf-8', data: Buffer.alloc(0) },
    ];
    for (const f of files) await store.put(`${id}/${f.name}`, f.data, f.type);
    for (const f of files) {
      const res = await fetch(await store.urlFor(`${id}/${f.name}`, inAnHour()));
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe(f.type);
      expect(Buffer.from(await res.arrayBuffer()).equals(f.data)).toBe(true);
    }
  });

  it('replaces a blob on a second put', async () => {
    const store = await create();
    const key = `${randomUUID()}/out.webp`;
    await store.put(key, Buffer.from('first'), 'image/png');
    await store.put(key, Buffer.from('second version'), 'image/webp');
    const res = await fetch(await store.urlFor(key, inAnHour()));
    expect(res.headers.get('content-type')).toBe('image/webp');
    expect(await res.text()).toBe('second version');
    if (store.stat) expect(await store.stat(key)).toEqual({ key, size: 14, contentType: 'image/webp' });
  });

  it('stat reports stored blobs and null for missing ones', async () => {
    const store = await create();
    if (!store.stat) return;
    const key = `${randomUUID()}/a.jpg`;
    expect(await store.stat(key)).toBeNull();
    await store.put(key, randomBytes(1234), 'image/jpeg');
    expect(await store.stat(key)).toEqual({ key, size: 1234, contentType: 'image/jpeg' });
  });

  it('refuses a URL whose signature was tampered with', async () => {
    const store = await create();
    const key = `${randomUUID()}/out.png`;
    await store.put(key, pngLike(100), 'image/png');
    const url = new URL(await store.urlFor(key, inAnHour()));
    // `signature` (local) or `X-Amz-Signature` (S3).
    const name = [...url.searchParams.keys()].find((k) => /signature$/i.test(k))!;
    const signature = url.searchParams.get(name)!;
    url.searchParams.set(name, `${signature.slice(0, -1)}${signature.endsWith('A') ? 'B' : 'A'}`);
    const res = await fetch(url);
    expect(res.status).toBe(403);
  });

  it('refuses an expired URL', async () => {
    const store = await create();
    const key = `${randomUUID()}/out.png`;
    await store.put(key, pngLike(100), 'image/png');
    const res = await fetch(await store.urlFor(key, Math.floor(Date.now() / 1000) - 5));
    expect(res.status).toBe(403);
  });

  it('a URL for one key does not open another', async () => {
    const store = await create();
    const id = randomUUID();
    await store.put(`${id}/a.png`, pngLike(100), 'image/png');
    await store.put(`${id}/b.png`, pngLike(100), 'image/png');
    const url = new URL(await store.urlFor(`${id}/a.png`, inAnHour()));
    url.pathname = url.pathname.replace(/a\.png$/, 'b.png');
    expect((await fetch(url)).status).toBe(403);
  });

  it('deletePrefix removes every file of a prediction, which then answers 404', async () => {
    const store = await create();
    const id = randomUUID();
    const keys = [`${id}/output_0.png`, `${id}/output_1.png`, `${id}/output_2.png`];
    for (const key of keys) await store.put(key, pngLike(500), 'image/png');
    const urls = await Promise.all(keys.map((key) => store.urlFor(key, inAnHour())));
    expect((await fetch(urls[0]!)).status).toBe(200);

    expect(await store.deletePrefix(id)).toBe(3);
    for (const url of urls) {
      const res = await fetch(url);
      expect(res.status).toBe(404);
      await res.arrayBuffer();
    }
    if (store.stat) expect(await store.stat(keys[0]!)).toBeNull();
    // Purging twice is harmless.
    expect(await store.deletePrefix(id)).toBe(0);
  });

  it('deletePrefix takes whole segments and leaves other predictions alone', async () => {
    const store = await create();
    const base = randomUUID().slice(0, 8);
    await store.put(`${base}-1/out.png`, pngLike(100), 'image/png');
    await store.put(`${base}-10/out.png`, pngLike(100), 'image/png');
    expect(await store.deletePrefix(`${base}-1/`)).toBe(1);
    const res = await fetch(await store.urlFor(`${base}-10/out.png`, inAnHour()));
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  });

  it('deletePrefix of a single key deletes just that blob', async () => {
    const store = await create();
    const id = randomUUID();
    await store.put(`${id}/a.png`, pngLike(100), 'image/png');
    await store.put(`${id}/b.png`, pngLike(100), 'image/png');
    expect(await store.deletePrefix(`${id}/a.png`)).toBe(1);
    expect((await fetch(await store.urlFor(`${id}/a.png`, inAnHour()))).status).toBe(404);
    expect((await fetch(await store.urlFor(`${id}/b.png`, inAnHour()))).status).toBe(200);
  });

  it('deletePrefix of an unknown prediction deletes nothing', async () => {
    const store = await create();
    expect(await store.deletePrefix(randomUUID())).toBe(0);
  });

  it('concurrent puts of one key leave one whole version', async () => {
    const store = await create();
    const key = `${randomUUID()}/race.bin`;
    const versions = Array.from({ length: 8 }, () => randomBytes(200_000));
    await Promise.all(versions.map((v) => store.put(key, v, 'application/octet-stream')));
    const body = Buffer.from(await (await fetch(await store.urlFor(key, inAnHour()))).arrayBuffer());
    expect(versions.some((v) => v.equals(body))).toBe(true);
  });

  describe('refuses unsafe keys', () => {
    const unsafe = [
      '',
      '../outside.png',
      'a/../../outside.png',
      'a/..',
      '/etc/passwd',
      'a//b.png',
      'a/b.png/',
      'a/.hidden',
      '.meta',
      'a\\..\\b.png',
      '%2e%2e/x.png',
      'a/b c.png',
      'a/b\n.png',
      'a/é.png',
      `a/${'x'.repeat(600)}`,
    ];
    for (const key of unsafe) {
      it(`put, urlFor and deletePrefix refuse ${JSON.stringify(key.slice(0, 40))}`, async () => {
        const store = await create();
        await expect(store.put(key, Buffer.from('x'), 'text/plain')).rejects.toThrow(/Invalid blob key/);
        await expect(Promise.resolve().then(() => store.urlFor(key, inAnHour()))).rejects.toThrow(
          /Invalid blob key/,
        );
        if (key !== 'a/b.png/') await expect(store.deletePrefix(key)).rejects.toThrow(/Invalid blob key/);
      });
    }

    it('deletePrefix refuses an empty or root prefix', async () => {
      const store = await create();
      await expect(store.deletePrefix('')).rejects.toThrow(/Invalid blob key/);
      await expect(store.deletePrefix('/')).rejects.toThrow(/Invalid blob key/);
    });
  });

  it('refuses a content type that could break the header', async () => {
    const store = await create();
    await expect(
      store.put(`${randomUUID()}/x.png`, Buffer.from('x'), 'image/png\r\nx-evil: 1'),
    ).rejects.toThrow(/content type/);
    await expect(store.put(`${randomUUID()}/x.png`, Buffer.from('x'), 'png')).rejects.toThrow(/content type/);
  });
}

for (const harness of [localHarness(), s3Harness()]) {
  describe(`BlobStore contract: ${harness.name}`, () => contract(harness));
}
