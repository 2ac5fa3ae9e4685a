import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalDiskBlobStore } from '../../src/blobs/local.js';
import { isValidBlobKey } from '../../src/blobs/types.js';

const SECRET = 'local-store-secret-0123456789abcd';
const ID = 'b1c2d3e4-0000-4000-8000-000000000001';

let dir: string;
let store: LocalDiskBlobStore;

beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'gantry-local-blobs-'));
  store = new LocalDiskBlobStore(dir, { secret: SECRET, publicUrl: 'https://files.example.com' });
});

afterEach(async () => {
  await store.close();
  await rm(dir, { recursive: true, force: true });
});

describe('LocalDiskBlobStore layout', () => {
  it('keeps one folder per prediction: the file, its sidecar, and no temporary files', async () => {
    const data = randomBytes(2048);
    await store.put(`${ID}/output_0.png`, data, 'image/png');
    await store.put(`${ID}/output_0.png`, data, 'image/png');
    expect(await readdir(dir)).toEqual([ID]);
    expect((await readdir(path.join(dir, ID))).sort()).toEqual(['.output_0.png.meta.json', 'output_0.png']);
    expect((await readFile(path.join(dir, ID, 'output_0.png'))).equals(data)).toBe(true);
  });

  it('counts only blobs, not sidecars, when purging', async () => {
    await store.put(`${ID}/a.png`, randomBytes(10), 'image/png');
    await store.put(`${ID}/nested/b.png`, randomBytes(10), 'image/png');
    expect(await store.deletePrefix(ID)).toBe(2);
    expect(await readdir(dir)).toEqual([]);
  });

  it('falls back to application/octet-stream when the sidecar is gone', async () => {
    await store.put(`${ID}/a.bin`, randomBytes(10), 'image/png');
    await unlink(path.join(dir, ID, '.a.bin.meta.json'));
    expect(await store.stat(`${ID}/a.bin`)).toEqual({
      key: `${ID}/a.bin`,
      size: 10,
      contentType: 'application/octet-stream',
    });
  });

  it('open gives a stream of a range and releases the file', async () => {
    const data = randomBytes(1000);
    await store.put(`${ID}/a.bin`, data, 'application/octet-stream');
    const blob = (await store.open(`${ID}/a.bin`))!;
    expect(blob.size).toBe(1000);
    const chunks: Buffer[] = [];
    for await (const chunk of blob.stream({ start: 10, end: 19 })) chunks.push(chunk as Buffer);
    expect(Buffer.concat(chunks).equals(data.subarray(10, 20))).toBe(true);
    await blob.close();
    expect(() => blob.stream()).toThrow(/already/);
  });

  it('an opened blob still reads its bytes after a purge (no half-served files)', async () => {
    const data = randomBytes(5000);
    await store.put(`${ID}/a.bin`, data, 'application/octet-stream');
    const blob = (await store.open(`${ID}/a.bin`))!;
    await store.deletePrefix(ID);
    const chunks: Buffer[] = [];
    for await (const chunk of blob.stream()) chunks.push(chunk as Buffer);
    expect(Buffer.concat(chunks).equals(data)).toBe(true);
    expect(await store.open(`${ID}/a.bin`)).toBeNull();
  });

  it('a folder is not a blob', async () => {
    await store.put(`${ID}/nested/b.png`, randomBytes(10), 'image/png');
    expect(await store.open(`${ID}/nested`)).toBeNull();
  });

  it('signs URLs on its public URL', () => {
    const url = new URL(store.urlFor(`${ID}/a.png`, 2_000_000_000));
    expect(url.origin).toBe('https://files.example.com');
    expect(url.pathname).toBe(`/v1/files/${ID}/a.png`);
  });
});

describe('LocalDiskBlobStore configuration', () => {
  it('refuses a weak secret or a relative public URL at construction', () => {
    expect(() => new LocalDiskBlobStore(dir, { secret: 'short', publicUrl: 'https://x.test' })).toThrow(
      /16 bytes/,
    );
    expect(() => new LocalDiskBlobStore(dir, { secret: SECRET, publicUrl: '/files' })).toThrow(/publicUrl/);
  });

  it('reads a public URL given as a function on every link, and checks it then', () => {
    let origin = 'http://127.0.0.1:1234';
    const lazy = new LocalDiskBlobStore(dir, { secret: SECRET, publicUrl: () => origin });
    expect(lazy.urlFor(`${ID}/a.png`, 2_000_000_000)).toMatch(/^http:\/\/127\.0\.0\.1:1234\/v1\/files\//);
    origin = '';
    expect(() => lazy.urlFor(`${ID}/a.png`, 2_000_000_000)).toThrow(/publicUrl/);
  });
});

describe('isValidBlobKey', () => {
  it('accepts prediction ids with ordinary file names', () => {
    for (const key of [`${ID}/output_0.png`, `${ID}/speech.mp3`, `${ID}/clip.final-v2.mp4`, 'a', 'a/b/c']) {
      expect(isValidBlobKey(key), key).toBe(true);
    }
  });

  it('refuses dot segments, odd separators and too many segments', () => {
    for (const key of ['a/b..c', 'a/./b', 'a/-x', 'C:/x', 'a/b?c', 'a/b#c', Array(9).fill('a').join('/')]) {
      expect(isValidBlobKey(key), key).toBe(false);
    }
  });
});
