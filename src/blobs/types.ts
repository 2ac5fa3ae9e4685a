/**
 * Output file storage (spec 2.3 `metadata.storage.files`, spec 8 retention). A prediction's outputs are
 * stored under keys `<predictionId>/<name>`, handed to clients as expiring URLs, and purged together
 * when the retention window ends. The embedded default keeps them on local disk behind signed URLs;
 * an S3-compatible bucket with pre-signed URLs implements the same interface.
 */
import type { Readable } from 'node:stream';

/** What a put stored: the facts `metadata.storage.files` reports (its `url` comes from urlFor). */
export interface StoredBlob {
  key: string;
  /** Bytes. */
  size: number;
  /** MIME type, sent back as the file's Content-Type. */
  contentType: string;
}

export interface BlobStore {
  /** Stores (or replaces) the blob at `key`. Readers see the old bytes or the new, never a partial file. */
  put(key: string, data: Buffer, contentType: string): Promise<StoredBlob>;
  /** A URL that serves the blob to anyone holding it until `expiresAt` (epoch seconds). */
  urlFor(key: string, expiresAt: number): string | Promise<string>;
  /**
   * Deletes the blob named `prefix` and every blob under `prefix/` (whole segments: `p-1` never touches
   * `p-10/…`). Returns how many blobs were deleted; 0 when there were none.
   */
  deletePrefix(prefix: string): Promise<number>;
  /** The stored facts of one blob, or null when it does not exist. */
  stat?(key: string): Promise<StoredBlob | null>;
  close(): Promise<void>;
}

/** One blob opened for reading: its facts are those of the bytes the streams return. */
export interface OpenedBlob extends StoredBlob {
  /** A strong, quoted entity tag; it changes whenever the blob is replaced. */
  etag: string;
  /** Epoch milliseconds of the last write. */
  modifiedAt: number;
  /**
   * Streams the bytes `start..end` (inclusive), or all of them. The stream owns the open file from then
   * on and releases it when it ends or is destroyed; call at most once.
   */
  stream(range?: { start: number; end: number }): Readable;
  /** Releases the open file when no stream was taken (or after one was; then it does nothing). */
  close(): Promise<void>;
}

/** The read side the file routes need; LocalDiskBlobStore implements it. */
export interface BlobReader {
  /** Opens the blob at a valid key, or returns null when it does not exist (never existed or purged). */
  open(key: string): Promise<OpenedBlob | null>;
}

/**
 * One key segment: starts with a letter or digit (so `.`/`..` and hidden names are impossible, and the
 * local store can keep its own dot-files beside blobs), then letters, digits, `.`, `_`, `-`.
 */
const SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const MAX_KEY_LENGTH = 512;
const MAX_SEGMENTS = 8;

/**
 * Whether `key` is a safe blob key: 1 to 8 `/`-separated segments of safe characters, no `..`
 * anywhere, no leading, trailing or doubled `/`. Keys are used as file paths and URL paths, so anything
 * that could be read as a traversal, an absolute path or an encoding is refused, not normalised.
 */
export function isValidBlobKey(key: string): boolean {
  if (typeof key !== 'string' || key.length === 0 || key.length > MAX_KEY_LENGTH) return false;
  if (key.includes('..')) return false;
  const segments = key.split('/');
  return segments.length <= MAX_SEGMENTS && segments.every((s) => SEGMENT.test(s));
}

export class InvalidBlobKeyError extends Error {
  constructor(key: string) {
    // The key is quoted as JSON so control characters in a hostile key cannot forge log lines.
    super(
      `Invalid blob key ${JSON.stringify(key.slice(0, 80))}: use <predictionId>/<name> of [A-Za-z0-9._-]`,
    );
    this.name = 'InvalidBlobKeyError';
  }
}

export function assertValidBlobKey(key: string): void {
  if (!isValidBlobKey(key)) throw new InvalidBlobKeyError(key);
}

/** A prefix for deletePrefix: a valid key, optionally with one trailing `/`. Returns it without the `/`. */
export function normalizeBlobPrefix(prefix: string): string {
  const trimmed = typeof prefix === 'string' && prefix.endsWith('/') ? prefix.slice(0, -1) : prefix;
  assertValidBlobKey(trimmed);
  return trimmed;
}

const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
/** type/subtype with optional parameters of printable ASCII: no CR/LF, so it is safe as a header value. */
const CONTENT_TYPE = new RegExp(`^${TOKEN}/${TOKEN}(?:\\s*;[\\x20-\\x7e]*)?$`);

export function isValidContentType(contentType: string): boolean {
  return typeof contentType === 'string' && contentType.length <= 200 && CONTENT_TYPE.test(contentType);
}
