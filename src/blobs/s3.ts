/**
 * A BlobStore on any S3-compatible bucket (AWS S3, MinIO, Cloudflare R2, Ceph RGW, ...): blobs are
 * objects `<prefix>/<key>`, handed out as SigV4 pre-signed GET URLs that the bucket serves itself, so
 * Gantry's file routes are not involved and this store is no BlobReader.
 *
 * Signing is aws4fetch's AwsV4Signer (one small, dependency-free package); the HTTP calls are undici's,
 * on an Agent this store owns and closes. Only five operations are used: PutObject, HeadObject,
 * ListObjectsV2, DeleteObjects, and pre-signed GetObject.
 *
 * The secret access key never leaves this module in any form but signatures: it is kept in private
 * fields (invisible to util.inspect and JSON.stringify), and every message built from a response is
 * scrubbed of it.
 */
import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { AwsV4Signer } from 'aws4fetch';
import { Agent, request } from 'undici';
import { type BackoffPolicy, nextDelayMs } from '../backoff.js';
import {
  assertValidBlobKey,
  type BlobStore,
  isValidBlobKey,
  isValidContentType,
  normalizeBlobPrefix,
  type StoredBlob,
} from './types.js';

export interface S3BlobStoreOptions {
  /**
   * The S3 API origin, e.g. `http://127.0.0.1:9000` (MinIO), `https://<account>.r2.cloudflarestorage.com`
   * (R2), `https://rgw.example.com` (Ceph). Default AWS: `https://s3.<region>.amazonaws.com`.
   */
  endpoint?: string;
  /** The signing region: the bucket's AWS region, `auto` for R2, what the server is set to for MinIO/Ceph. */
  region: string;
  bucket: string;
  accessKeyId: string;
  secretAccessKey: string;
  /**
   * Address the bucket as `<endpoint>/<bucket>/<key>` (what MinIO and most self-hosted servers need)
   * instead of `<bucket>.<endpoint host>/<key>`. Path style is used anyway when the endpoint host is an IP
   * address or `localhost`, or the bucket name cannot be a DNS label (it has dots or capitals).
   */
  forcePathStyle?: boolean;
  /** Object key prefix, e.g. `gantry/outputs`: blob `<id>/<name>` is the object `<prefix>/<id>/<name>`. */
  prefix?: string;
  /** Keys per ListObjectsV2 page, and so per DeleteObjects batch, in deletePrefix: 1 to 1000 (default 1000). */
  pageSize?: number;
  /** Attempts for a request that fails on the network or answers 5xx or 429 (default 3). */
  maxAttempts?: number;
  /** Time limit of one attempt in milliseconds, body upload included (default 120 000). */
  timeoutMs?: number;
}

/** SigV4 pre-signed URLs live at most 7 days (S3 refuses a longer X-Amz-Expires). */
export const S3_MAX_PRESIGN_SECONDS = 604_800;
/** S3's cap on keys per ListObjectsV2 page and per DeleteObjects request. */
export const S3_MAX_BATCH = 1000;

const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
const FALLBACK_CONTENT_TYPE = 'application/octet-stream';
const SEND_RETRY: BackoffPolicy = { baseMs: 100, maxMs: 2_000, jitter: 'equal' };

/**
 * A failed S3 call. The message names the operation, the object or bucket, S3's status, error code and
 * message, and a hint for the usual misconfigurations; it never contains the secret access key.
 */
export class S3Error extends Error {
  readonly operation: string;
  /** The HTTP status, or undefined when no answer came (network failure, time-out). */
  readonly status: number | undefined;
  /** S3's error code, e.g. `SignatureDoesNotMatch`, `NoSuchBucket`, `AccessDenied`. */
  readonly code: string | undefined;
  readonly requestId: string | undefined;

  constructor(
    message: string,
    details: { operation: string; status?: number; code?: string; requestId?: string },
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'S3Error';
    this.operation = details.operation;
    this.status = details.status;
    this.code = details.code;
    this.requestId = details.requestId;
  }
}

interface S3Response {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

interface Call {
  operation: string;
  /** What the call is about, for messages: `s3://bucket/key` or `s3://bucket`. */
  target: string;
  method: 'GET' | 'HEAD' | 'PUT' | 'POST';
  url: string;
  headers?: Record<string, string>;
  body?: Buffer;
}

export class S3BlobStore implements BlobStore {
  readonly bucket: string;
  readonly region: string;
  /** The key prefix without slashes, '' for none. */
  readonly prefix: string;
  readonly #accessKeyId: string;
  readonly #secretAccessKey: string;
  /** aws4fetch's cache of derived signing keys (one per day); private as it is keyed by the secret. */
  readonly #signingKeys = new Map<string, ArrayBuffer>();
  readonly #agent = new Agent();
  /** `scheme://host[:port]` of the requests, with the bucket in the host for virtual-hosted style. */
  readonly #origin: string;
  /** Path of the bucket's root on #origin, with no trailing slash: '' (virtual-hosted) or `/bucket`. */
  readonly #bucketPath: string;
  readonly #pageSize: number;
  readonly #maxAttempts: number;
  readonly #timeoutMs: number;
  #closed = false;

  constructor(options: S3BlobStoreOptions) {
    const { region, bucket, accessKeyId, secretAccessKey } = options ?? ({} as S3BlobStoreOptions);
    // Messages name the setting, never its value: a secret may have been put in the wrong field.
    if (typeof region !== 'string' || !/^[A-Za-z0-9-]{1,64}$/.test(region)) {
      throw new Error('S3 region is required: letters, digits and dashes, e.g. us-east-1 (auto for R2)');
    }
    if (typeof bucket !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]$/.test(bucket)) {
      throw new Error('S3 bucket is required: 3 to 255 letters, digits, dots, dashes or underscores');
    }
    if (
      typeof accessKeyId !== 'string' ||
      !/^[\x21-\x7e]{1,256}$/.test(accessKeyId) ||
      accessKeyId.includes('/')
    ) {
      throw new Error('S3 accessKeyId is required: printable ASCII without spaces or slashes');
    }
    if (typeof secretAccessKey !== 'string' || !/^[\x21-\x7e]{1,256}$/.test(secretAccessKey)) {
      throw new Error('S3 secretAccessKey is required: printable ASCII without spaces');
    }
    this.region = region;
    this.bucket = bucket;
    this.#accessKeyId = accessKeyId;
    this.#secretAccessKey = secretAccessKey;

    const prefix = (options.prefix ?? '').replace(/^\/+|\/+$/g, '');
    if (prefix !== '' && !isValidBlobKey(prefix)) {
      throw new Error('S3 prefix must be /-separated segments of [A-Za-z0-9._-], e.g. gantry/outputs');
    }
    this.prefix = prefix;

    const endpoint = parseEndpoint(options.endpoint ?? `https://s3.${region}.amazonaws.com`);
    const virtualHosted =
      options.forcePathStyle !== true &&
      /^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$/.test(bucket) &&
      isIP(endpoint.hostname.replace(/^\[|\]$/g, '')) === 0 &&
      endpoint.hostname !== 'localhost';
    const basePath = endpoint.pathname.replace(/\/+$/, '');
    this.#origin = virtualHosted ? `${endpoint.protocol}//${bucket}.${endpoint.host}` : endpoint.origin;
    this.#bucketPath = virtualHosted ? basePath : `${basePath}/${bucket}`;

    this.#pageSize = intOption('pageSize', options.pageSize, S3_MAX_BATCH, 1, S3_MAX_BATCH);
    this.#maxAttempts = intOption('maxAttempts', options.maxAttempts, 3, 1, 10);
    this.#timeoutMs = intOption('timeoutMs', options.timeoutMs, 120_000, 1, 3_600_000);
  }

  async put(key: string, data: Buffer, contentType: string): Promise<StoredBlob> {
    assertValidBlobKey(key);
    if (!isValidContentType(contentType)) {
      throw new Error(`Invalid content type ${JSON.stringify(String(contentType).slice(0, 80))}`);
    }
    const objectKey = this.#objectKey(key);
    const res = await this.#send({
      operation: 'PutObject',
      target: this.#target(objectKey),
      method: 'PUT',
      url: this.#objectUrl(objectKey),
      headers: {
        'content-type': contentType,
        'content-length': String(data.length),
        // S3 checks both: a corrupted upload is refused rather than stored.
        'content-md5': createHash('md5').update(data).digest('base64'),
        'x-amz-content-sha256': createHash('sha256').update(data).digest('hex'),
      },
      body: data,
    });
    if (res.status !== 200) throw this.#failure('PutObject', this.#target(objectKey), res);
    return { key, size: data.length, contentType };
  }

  /**
   * A pre-signed GET URL that works while now < `expiresAt` (epoch seconds), as the local store's do, or
   * for 7 days when that is sooner: S3 allows no more. S3 serves a URL through second X-Amz-Date +
   * X-Amz-Expires inclusive, so that sum is `expiresAt - 1`; an `expiresAt` already past gives a URL
   * that is already expired (X-Amz-Expires must be at least 1, so it is signed in the past).
   */
  async urlFor(key: string, expiresAt: number): Promise<string> {
    assertValidBlobKey(key);
    if (!Number.isSafeInteger(expiresAt) || expiresAt <= 0) {
      throw new Error(`expiresAt must be whole epoch seconds, got ${expiresAt}`);
    }
    const now = Math.floor(Date.now() / 1000);
    const lastValid = expiresAt - 1;
    const signedAt = Math.max(0, Math.min(now, lastValid - 1));
    const lifetime = Math.max(1, Math.min(lastValid - signedAt, S3_MAX_PRESIGN_SECONDS));
    const url = new URL(this.#objectUrl(this.#objectKey(key)));
    url.searchParams.set('X-Amz-Expires', String(lifetime));
    const signed = await this.#signer('GET', url.toString(), {}, { signQuery: true, at: signedAt }).sign();
    return signed.url.toString();
  }

  /**
   * Deletes the object `<prefix>` and every object under `<prefix>/`: ListObjectsV2 pages of pageSize
   * keys, each deleted with one DeleteObjects. A key some DeleteObjects refused makes it throw (after the
   * rest of that batch was deleted); calling it again deletes what is left.
   */
  async deletePrefix(prefix: string): Promise<number> {
    const base = this.#objectKey(normalizeBlobPrefix(prefix));
    let deleted = 0;
    if ((await this.#head(base)) !== null) deleted += await this.#deleteObjects([base]);
    const under = `${base}/`;
    let token: string | undefined;
    do {
      const page = await this.#list(under, token);
      // Whatever the server answers, nothing outside `<prefix>/` is ever deleted.
      const keys = page.keys.filter((k) => k.startsWith(under));
      if (keys.length > 0) deleted += await this.#deleteObjects(keys);
      token = page.nextToken;
    } while (token !== undefined);
    return deleted;
  }

  async stat(key: string): Promise<StoredBlob | null> {
    assertValidBlobKey(key);
    const head = await this.#head(this.#objectKey(key));
    return head === null ? null : { key, ...head };
  }

  /** Closes the connections; any call after this fails. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#agent.close();
  }

  /** Size and type of an object by its full key, or null when S3 answers 404. */
  async #head(objectKey: string): Promise<{ size: number; contentType: string } | null> {
    const target = this.#target(objectKey);
    const res = await this.#send({
      operation: 'HeadObject',
      target,
      method: 'HEAD',
      url: this.#objectUrl(objectKey),
    });
    if (res.status === 404) return null;
    if (res.status !== 200) throw this.#failure('HeadObject', target, res);
    const size = Number(header(res, 'content-length'));
    if (!Number.isSafeInteger(size) || size < 0) {
      throw new S3Error(`S3 HeadObject ${target} answered without a valid Content-Length`, {
        operation: 'HeadObject',
        status: res.status,
      });
    }
    const type = header(res, 'content-type');
    return {
      size,
      contentType: type !== undefined && isValidContentType(type) ? type : FALLBACK_CONTENT_TYPE,
    };
  }

  /** One ListObjectsV2 page of full keys under `prefix`, and the token of the next page if there is one. */
  async #list(prefix: string, token: string | undefined): Promise<{ keys: string[]; nextToken?: string }> {
    const url = new URL(this.#bucketUrl());
    url.searchParams.set('list-type', '2');
    url.searchParams.set('prefix', prefix);
    url.searchParams.set('max-keys', String(this.#pageSize));
    // Keys come back URL-encoded, so any key (even one XML cannot carry) is read right.
    url.searchParams.set('encoding-type', 'url');
    if (token !== undefined) url.searchParams.set('continuation-token', token);
    const target = `s3://${this.bucket}/${prefix}`;
    const res = await this.#send({ operation: 'ListObjectsV2', target, method: 'GET', url: url.toString() });
    if (res.status !== 200) throw this.#failure('ListObjectsV2', target, res);
    const xml = res.body.toString('utf8');
    if (!/<ListBucketResult[\s>]/.test(xml)) {
      throw new S3Error(`S3 ListObjectsV2 ${target} answered something that is not a ListBucketResult`, {
        operation: 'ListObjectsV2',
        status: res.status,
      });
    }
    const urlEncoded = elements(xml, 'EncodingType')[0] === 'url';
    const keys = elements(xml, 'Contents').flatMap((contents) =>
      elements(contents, 'Key').map((k) => (urlEncoded ? decodeListedKey(k, target) : k)),
    );
    const truncated = elements(xml, 'IsTruncated')[0] === 'true';
    const nextToken = elements(xml, 'NextContinuationToken')[0];
    if (truncated && !nextToken) {
      throw new S3Error(`S3 ListObjectsV2 ${target} is truncated but gave no NextContinuationToken`, {
        operation: 'ListObjectsV2',
        status: res.status,
      });
    }
    return truncated ? { keys, nextToken } : { keys };
  }

  /** DeleteObjects of up to 1000 full keys, quietly; returns how many went, throws if any did not. */
  async #deleteObjects(keys: string[]): Promise<number> {
    const target = `s3://${this.bucket}/${keys[0]}${keys.length > 1 ? ` and ${keys.length - 1} more` : ''}`;
    const objects = keys.map((k) => `<Object><Key>${xmlEscape(k)}</Key></Object>`).join('');
    const body = Buffer.from(
      `<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>${objects}</Delete>`,
    );
    const res = await this.#send({
      operation: 'DeleteObjects',
      target,
      method: 'POST',
      url: `${this.#bucketUrl()}?delete`,
      headers: {
        'content-type': 'application/xml',
        'content-length': String(body.length),
        // S3 requires Content-MD5 (or a checksum header) on DeleteObjects.
        'content-md5': createHash('md5').update(body).digest('base64'),
        'x-amz-content-sha256': createHash('sha256').update(body).digest('hex'),
      },
      body,
    });
    const xml = res.body.toString('utf8');
    // S3 can answer 200 with an error document; only a DeleteResult is a success.
    if (res.status !== 200 || !/<DeleteResult[\s>]/.test(xml))
      throw this.#failure('DeleteObjects', target, res);
    const errors = elements(xml, 'Error').map((e) => ({
      key: elements(e, 'Key')[0] ?? '?',
      code: elements(e, 'Code')[0] ?? 'unknown',
      message: elements(e, 'Message')[0] ?? '',
    }));
    if (errors.length > 0) {
      const first = errors[0]!;
      throw new S3Error(
        this.#scrub(
          `S3 DeleteObjects in s3://${this.bucket} could not delete ${errors.length} of ${keys.length} objects ` +
            `(first: ${first.key}: ${first.code}: ${first.message}); the others were deleted`,
        ),
        { operation: 'DeleteObjects', status: res.status, code: first.code },
      );
    }
    return keys.length;
  }

  /**
   * Signs and sends one request, retrying network failures, 5xx and 429 with exponential backoff; each
   * attempt is signed anew. Returns any other answer, whatever its status, with its body read.
   */
  async #send(call: Call): Promise<S3Response> {
    for (let attempt = 1; ; attempt++) {
      if (this.#closed) throw new Error('S3BlobStore is closed');
      const signed = await this.#signer(call.method, call.url, call.headers ?? {}).sign();
      try {
        const res = await request(signed.url, {
          method: call.method,
          headers: Object.fromEntries(signed.headers),
          body: call.body,
          dispatcher: this.#agent,
          signal: AbortSignal.timeout(this.#timeoutMs),
        });
        const body = Buffer.from(await res.body.arrayBuffer());
        const retryable = res.statusCode >= 500 || res.statusCode === 429;
        if (!retryable || attempt >= this.#maxAttempts)
          return { status: res.statusCode, headers: res.headers, body };
      } catch (err) {
        if (this.#closed) throw new Error('S3BlobStore is closed');
        if (attempt >= this.#maxAttempts) {
          const reason = err instanceof Error ? err.message : String(err);
          throw new S3Error(
            this.#scrub(`S3 ${call.operation} ${call.target} failed after ${attempt} attempts: ${reason}`),
            { operation: call.operation },
            { cause: err },
          );
        }
      }
      await sleep(nextDelayMs(attempt, SEND_RETRY));
    }
  }

  #signer(
    method: string,
    url: string,
    headers: Record<string, string>,
    presign?: { signQuery: true; at: number },
  ): AwsV4Signer {
    return new AwsV4Signer({
      method,
      url,
      // Header auth always carries the payload hash; aws4fetch would otherwise send UNSIGNED-PAYLOAD.
      headers: presign ? headers : { 'x-amz-content-sha256': EMPTY_SHA256, ...headers },
      accessKeyId: this.#accessKeyId,
      secretAccessKey: this.#secretAccessKey,
      service: 's3',
      region: this.region,
      cache: this.#signingKeys,
      ...(presign ? { signQuery: true, datetime: amzDate(presign.at) } : {}),
    });
  }

  /** The error for an unexpected answer: S3's code and message from the XML body, or the status alone (HEAD). */
  #failure(operation: string, target: string, res: S3Response): S3Error {
    const xml = res.body.toString('utf8');
    const code = elements(xml, 'Code')[0] ?? STATUS_CODES[res.status] ?? `HTTP${res.status}`;
    const message = elements(xml, 'Message')[0];
    const requestId = elements(xml, 'RequestId')[0] ?? header(res, 'x-amz-request-id');
    const bucketRegion = header(res, 'x-amz-bucket-region');
    let hint = HINTS[code] ?? '';
    if (bucketRegion !== undefined && bucketRegion !== this.region) {
      hint = ` (the bucket is in region ${bucketRegion}, not ${this.region})`;
    } else if (operation === 'HeadObject' && res.status === 403) {
      hint = ' (S3 also answers 403 for a missing object when the credentials lack s3:ListBucket)';
    }
    const text =
      `S3 ${operation} ${target} failed: ${res.status} ${code}${message ? `: ${message}` : ''}${hint}` +
      (requestId ? ` (request id ${requestId})` : '');
    return new S3Error(this.#scrub(text), {
      operation,
      status: res.status,
      code,
      ...(requestId ? { requestId } : {}),
    });
  }

  /**
   * Makes text that came (in part) from elsewhere safe to log: a server could echo anything, so the
   * secret is removed, and control characters too, so a hostile key or message cannot forge log lines.
   */
  #scrub(text: string): string {
    return text
      .split(this.#secretAccessKey)
      .join('[secret]')
      .replace(/\p{Cc}/gu, ' ');
  }

  #objectKey(key: string): string {
    return this.prefix === '' ? key : `${this.prefix}/${key}`;
  }

  #objectUrl(objectKey: string): string {
    // Valid keys are made of unreserved characters and `/`; encoding is a second line of defence.
    return `${this.#origin}${this.#bucketPath}/${objectKey.split('/').map(encodeURIComponent).join('/')}`;
  }

  #bucketUrl(): string {
    return `${this.#origin}${this.#bucketPath || '/'}`;
  }

  #target(objectKey: string): string {
    return `s3://${this.bucket}/${objectKey}`;
  }
}

const STATUS_CODES: Record<number, string> = {
  301: 'PermanentRedirect',
  400: 'BadRequest',
  403: 'Forbidden',
  404: 'NotFound',
  500: 'InternalError',
  503: 'ServiceUnavailable',
};

const HINTS: Record<string, string> = {
  SignatureDoesNotMatch: ' (check secretAccessKey, and that endpoint and region are the bucket’s)',
  InvalidAccessKeyId: ' (check accessKeyId)',
  AuthorizationHeaderMalformed: ' (check region)',
  PermanentRedirect: ' (the bucket is in another region or needs another endpoint)',
  NoSuchBucket: ' (create the bucket, or check bucket and endpoint)',
  RequestTimeTooSkewed: ' (this machine’s clock is off)',
};

function parseEndpoint(value: string): URL {
  const url = URL.canParse(value) ? new URL(value) : undefined;
  // Not echoed: an endpoint written with credentials in it would put them in the message.
  if (url === undefined || (url.protocol !== 'https:' && url.protocol !== 'http:')) {
    throw new Error('S3 endpoint must be an absolute http(s) URL, e.g. https://s3.us-east-1.amazonaws.com');
  }
  if (url.username || url.password || url.search || url.hash) {
    throw new Error('S3 endpoint must have no credentials, query or fragment');
  }
  return url;
}

function intOption(
  name: string,
  value: number | undefined,
  fallback: number,
  min: number,
  max: number,
): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`S3 ${name} must be an integer from ${min} to ${max}`);
  }
  return value;
}

/** Epoch seconds as SigV4's `yyyyMMddTHHmmssZ`. */
function amzDate(epochSeconds: number): string {
  return new Date(epochSeconds * 1000).toISOString().replace(/[:-]|\.\d{3}/g, '');
}

function header(res: S3Response, name: string): string | undefined {
  const value = res.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** The decoded text of every `<tag>…</tag>` in `xml` (S3's documents have no attributes on these). */
function elements(xml: string, tag: string): string[] {
  const re = new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`, 'g');
  return [...xml.matchAll(re)].map((m) => xmlUnescape(m[1]!));
}

function xmlEscape(value: string): string {
  return value
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;')
    .replace(/\r/g, '&#13;')
    .replace(/\n/g, '&#10;')
    .replace(/\t/g, '&#9;');
}

function xmlUnescape(value: string): string {
  return value.replace(/&(#x[0-9a-fA-F]{1,6}|#\d{1,7}|amp|lt|gt|quot|apos);/g, (whole, entity: string) => {
    if (entity.startsWith('#')) {
      const code = entity.startsWith('#x') ? Number.parseInt(entity.slice(2), 16) : Number(entity.slice(1));
      return code <= 0x10ffff ? String.fromCodePoint(code) : whole;
    }
    return ({ amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" } as Record<string, string>)[entity] ?? whole;
  });
}

/** A key from a listing with `encoding-type=url`: form-encoded, `+` for a space. */
function decodeListedKey(key: string, target: string): string {
  try {
    return decodeURIComponent(key.replace(/\+/g, ' '));
  } catch {
    throw new S3Error(`S3 ListObjectsV2 ${target} listed a key that is not valid URL encoding`, {
      operation: 'ListObjectsV2',
    });
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
