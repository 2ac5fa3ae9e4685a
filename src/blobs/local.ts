/**
 * The embedded default's BlobStore: files in a local directory, served by the file routes (routes.ts)
 * through signed, expiring URLs (signed-url.ts).
 *
 * Layout: the blob `<predictionId>/<name>` is the file `<dir>/<predictionId>/<name>`, its content type
 * is in the sidecar `<dir>/<predictionId>/.<name>.meta.json`. Valid key segments never start with a
 * dot, so sidecars and temporary files can never collide with a blob, and a prediction's folder holds
 * everything of it: purging is one recursive delete.
 */
import { createHash, randomUUID } from 'node:crypto';
import {
  type FileHandle,
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  unlink,
  writeFile,
} from 'node:fs/promises';
import path from 'node:path';
import { assertBlobSecret, type BlobSecret, signBlobUrl } from './signed-url.js';
import {
  assertValidBlobKey,
  type BlobReader,
  type BlobStore,
  isValidContentType,
  normalizeBlobPrefix,
  type OpenedBlob,
  type StoredBlob,
} from './types.js';

export interface LocalDiskBlobStoreOptions {
  /** Signs the URLs; the file routes must verify with the same secret. */
  secret: BlobSecret;
  /**
   * The public origin (and optional path prefix) clients reach Gantry at, e.g. https://api.example.com.
   * A function when it is known only once the server listens (port 0); it is read on every urlFor.
   */
  publicUrl: string | (() => string);
}

/** What the sidecar holds. Size and time come from the file itself, so they can never disagree with it. */
interface Sidecar {
  contentType: string;
}

const FALLBACK_CONTENT_TYPE = 'application/octet-stream';

export class LocalDiskBlobStore implements BlobStore, BlobReader {
  readonly root: string;
  private readonly secret: BlobSecret;
  private readonly publicUrl: () => string;

  constructor(dir: string, options: LocalDiskBlobStoreOptions) {
    this.root = path.resolve(dir);
    this.secret = options.secret;
    const { publicUrl } = options;
    this.publicUrl = typeof publicUrl === 'function' ? () => checkedPublicUrl(publicUrl()) : () => publicUrl;
    // Fail at start-up, not on the first prediction: a weak secret or a bad URL is a configuration error.
    assertBlobSecret(this.secret);
    if (typeof publicUrl === 'string') checkedPublicUrl(publicUrl);
  }

  async put(key: string, data: Buffer, contentType: string): Promise<StoredBlob> {
    assertValidBlobKey(key);
    if (!isValidContentType(contentType)) {
      throw new Error(`Invalid content type ${JSON.stringify(String(contentType).slice(0, 80))}`);
    }
    const file = this.pathOf(key);
    await mkdir(path.dirname(file), { recursive: true });
    // Sidecar first: a reader that finds the new bytes then also finds their type.
    const sidecar: Sidecar = { contentType };
    await writeAtomically(sidecarOf(file), JSON.stringify(sidecar));
    await writeAtomically(file, data);
    return { key, size: data.length, contentType };
  }

  urlFor(key: string, expiresAt: number): string {
    return signBlobUrl({ baseUrl: this.publicUrl(), key, expiresAt, secret: this.secret });
  }

  async deletePrefix(prefix: string): Promise<number> {
    const target = this.pathOf(normalizeBlobPrefix(prefix));
    const info = await stat(target).catch(ifMissing(null));
    if (info === null) return 0;
    if (info.isDirectory()) {
      const count = await countBlobs(target);
      await rm(target, { recursive: true, force: true });
      return count;
    }
    // The file first: while it exists, its sidecar does too.
    await rm(target, { force: true });
    await rm(sidecarOf(target), { force: true });
    return 1;
  }

  async stat(key: string): Promise<StoredBlob | null> {
    const blob = await this.open(key);
    if (blob === null) return null;
    await blob.close();
    return { key: blob.key, size: blob.size, contentType: blob.contentType };
  }

  async open(key: string): Promise<OpenedBlob | null> {
    assertValidBlobKey(key);
    const file = this.pathOf(key);
    // Open before stat: a purge or replacement after this point cannot change the bytes we serve,
    // because writes rename a new file into place and deletes only unlink the name.
    const handle = await open(file, 'r').catch(ifMissing(null));
    if (handle === null) return null;
    try {
      const info = await handle.stat();
      if (!info.isFile()) {
        await handle.close();
        return null;
      }
      const contentType = await readContentType(file);
      return openedBlob(key, handle, info.size, info.mtimeMs, contentType, etagOf(info));
    } catch (err) {
      await handle.close();
      throw err;
    }
  }

  /** Nothing to release: every operation opens and closes its own files. */
  async close(): Promise<void> {}

  /** The file of a validated key; the containment check is a second line of defence, not the first. */
  private pathOf(key: string): string {
    const file = path.join(this.root, ...key.split('/'));
    if (!file.startsWith(this.root + path.sep)) throw new Error('Blob key escapes the store directory');
    return file;
  }
}

function checkedPublicUrl(url: string): string {
  if (!/^https?:\/\//.test(url) || !URL.canParse(url)) {
    throw new Error(`publicUrl must be an absolute http(s) URL, got ${JSON.stringify(url)}`);
  }
  return url;
}

function openedBlob(
  key: string,
  handle: FileHandle,
  size: number,
  modifiedAt: number,
  contentType: string,
  etag: string,
): OpenedBlob {
  let released = false;
  return {
    key,
    size,
    contentType,
    etag,
    modifiedAt,
    stream(range) {
      if (released) throw new Error('Blob already streamed or closed');
      released = true;
      // autoClose: the stream closes the handle when it ends, fails or is destroyed (client gone).
      return handle.createReadStream(range ? { ...range, autoClose: true } : { start: 0, autoClose: true });
    },
    async close() {
      if (released) return;
      released = true;
      await handle.close();
    },
  };
}

/** Writes a temporary file beside the target and renames it into place: readers never see a partial file. */
async function writeAtomically(file: string, data: string | Buffer): Promise<void> {
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.${randomUUID()}.tmp`);
  try {
    await writeFile(temp, data, { flag: 'wx' });
    await rename(temp, file);
  } catch (err) {
    await unlink(temp).catch(() => {});
    throw err;
  }
}

function sidecarOf(file: string): string {
  return path.join(path.dirname(file), `.${path.basename(file)}.meta.json`);
}

async function readContentType(file: string): Promise<string> {
  const text = await readFile(sidecarOf(file), 'utf8').catch(ifMissing(null));
  if (text === null) return FALLBACK_CONTENT_TYPE;
  try {
    const { contentType } = JSON.parse(text) as Partial<Sidecar>;
    // Re-checked on read: the value becomes a response header.
    return typeof contentType === 'string' && isValidContentType(contentType)
      ? contentType
      : FALLBACK_CONTENT_TYPE;
  } catch {
    return FALLBACK_CONTENT_TYPE;
  }
}

/**
 * Strong ETag from the file's identity: every put renames a new file into place, so device, inode, size
 * and mtime change together with the bytes. Hashed so the response does not reveal inode numbers.
 */
function etagOf(info: { dev: number; ino: number; size: number; mtimeMs: number }): string {
  const identity = `${info.dev}:${info.ino}:${info.size}:${info.mtimeMs}`;
  return `"${createHash('sha256').update(identity).digest('base64url').slice(0, 27)}"`;
}

/** Blobs under a folder: every file that is not one of our dot-files (sidecars, temporaries). */
async function countBlobs(dir: string): Promise<number> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true }).catch(ifMissing([]));
  return entries.filter((e) => e.isFile() && !e.name.startsWith('.')).length;
}

/** A catch handler that turns "no such file" into `value` and rethrows anything else. */
function ifMissing<T>(value: T): (err: unknown) => T {
  return (err) => {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return value;
    throw err;
  };
}
