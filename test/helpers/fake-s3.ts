/**
 * A fake S3: a real node:http server on 127.0.0.1 speaking the S3 REST API for what S3BlobStore uses,
 * with S3's status codes, headers and XML bodies (as documented in the S3 API reference and seen on the
 * wire), and that VERIFIES Signature Version 4 exactly as S3 does, so a client bug shows up as S3's own
 * 403 SignatureDoesNotMatch rather than passing. The verifier is written here from the SigV4 spec, with
 * node:crypto, independently of the signer the store uses; s3.test.ts checks it against AWS's published
 * signature examples.
 *
 * - Addressing: path-style (`/bucket/key`), and virtual-hosted (`Host: bucket.anything`) for a known
 *   bucket, which AWS's published examples use.
 * - PutObject `PUT /b/k` (Content-MD5 and x-amz-content-sha256 checked), GetObject `GET /b/k` (single
 *   byte Range too), HeadObject, DeleteObject, ListObjectsV2 `GET /b?list-type=2` (prefix, max-keys
 *   capped at 1000, continuation-token, start-after, encoding-type=url), DeleteObjects `POST /b?delete`
 *   (Content-MD5 required, at most 1000 keys, Quiet).
 * - Auth: `Authorization: AWS4-HMAC-SHA256 ...` with x-amz-date and x-amz-content-sha256 (15 minutes
 *   of allowed clock skew), or query auth (`X-Amz-Algorithm` ... `X-Amz-Signature`) with X-Amz-Expires
 *   at most 604800 and `Request has expired` once past it. No auth is AccessDenied: buckets are private.
 *   Every x-amz-* header must be signed.
 * - The fake's clock can be moved (advanceClock / setClock) to test expiry without waiting.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  type RecordedExchange,
  type RecordingServer,
  type Exchange as ServerExchange,
  startRecordingServer,
} from './fake-server.js';

/** AWS-shaped credentials the fake accepts unless told otherwise; the secret has `/` and `+` as real ones do. */
export const FAKE_S3_ACCESS_KEY_ID = 'AKIAFAKEGANTRY7EXAMP';
export const FAKE_S3_SECRET_ACCESS_KEY = 'fAkE/gantry+S3secretKEY0123456789abcdEXAMP';
export const FAKE_S3_REGION = 'eu-west-1';
export const FAKE_S3_BUCKET = 'gantry-outputs';

/** How the fake answers one request before looking at it (queued with enqueue, or set as the default). */
export type FakeS3Behavior =
  | { kind: 'normal' }
  /** Answer with this S3 error (e.g. 503 SlowDown, 500 InternalError). */
  | { kind: 'error'; status: number; code: string; message?: string }
  /** Destroy the socket without answering (a network failure). */
  | { kind: 'cut' };

export type RecordedS3Request = RecordedExchange<FakeS3Behavior>;

export interface FakeS3Object {
  body: Buffer;
  contentType: string;
  /** Quoted hex MD5 of the body, as S3 gives for a single-part upload. */
  etag: string;
  /** Epoch milliseconds. */
  lastModified: number;
}

export interface FakeS3Options {
  accessKeyId?: string;
  secretAccessKey?: string;
  region?: string;
  /** Buckets that exist (default [FAKE_S3_BUCKET]). */
  buckets?: string[];
}

export interface FakeS3 extends RecordingServer<FakeS3Behavior> {
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
  /** The first bucket. */
  bucket: string;
  /** The objects of a bucket (default the first), live: tests may read and change it. */
  objects(bucket?: string): Map<string, FakeS3Object>;
  /** Stores an object without a request, e.g. thousands of them for a paging test. */
  seed(key: string, body: Buffer | string, contentType?: string, bucket?: string): void;
  /** Keys whose deletion DeleteObjects refuses with AccessDenied (an Error entry in its answer). */
  denyDelete: Set<string>;
  /** The fake's clock, epoch seconds. */
  now(): number;
  /** Moves the fake's clock by `seconds` (may be negative). */
  advanceClock(seconds: number): void;
  /** Pins the fake's clock to `epochSeconds`, or back to the real clock with undefined. */
  setClock(epochSeconds: number | undefined): void;
}

const XML_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n';
const S3_NAMESPACE = 'http://s3.amazonaws.com/doc/2006-03-01/';
/** SHA-256 of no bytes: the x-amz-content-sha256 of a request without a body. */
export const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
const MAX_PRESIGN_SECONDS = 604_800;
const MAX_SKEW_SECONDS = 15 * 60;
const MAX_KEYS = 1000;

/** An error answer: S3's status, code and message, plus the extra elements S3 adds for that code. */
class S3Fault {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly message: string,
    readonly extra: Array<[string, string]> = [],
  ) {}
}

const accessDenied = () => new S3Fault(403, 'AccessDenied', 'Access Denied');

export async function startFakeS3(options: FakeS3Options = {}): Promise<FakeS3> {
  const accessKeyId = options.accessKeyId ?? FAKE_S3_ACCESS_KEY_ID;
  const secretAccessKey = options.secretAccessKey ?? FAKE_S3_SECRET_ACCESS_KEY;
  const region = options.region ?? FAKE_S3_REGION;
  const bucketNames = options.buckets ?? [FAKE_S3_BUCKET];
  const buckets = new Map(bucketNames.map((name) => [name, new Map<string, FakeS3Object>()]));
  const denyDelete = new Set<string>();
  let pinned: number | undefined;
  let offset = 0;
  const now = () => (pinned ?? Math.floor(Date.now() / 1000)) + offset;

  const server = await startRecordingServer<FakeS3Behavior>((ex) => handle(ex), {
    name: 'fake S3',
    behavior: { kind: 'normal' },
    errorBody: (message) => ({ error: message }),
  });

  function handle(ex: ServerExchange<FakeS3Behavior>): void {
    const { req, res, behavior } = ex;
    const requestId = randomBytes(8).toString('hex').toUpperCase();
    res.setHeader('x-amz-request-id', requestId);
    res.setHeader('x-amz-id-2', randomBytes(48).toString('base64'));
    res.setHeader('server', 'AmazonS3');
    if (behavior.kind === 'cut') {
      ex.cut();
      return;
    }
    try {
      if (behavior.kind === 'error') {
        throw new S3Fault(
          behavior.status,
          behavior.code,
          behavior.message ?? 'Please reduce your request rate.',
        );
      }
      const request = parseRequest(req, ex.rawBody);
      authenticate(request);
      route(request, res);
    } catch (err) {
      if (!(err instanceof S3Fault)) throw err;
      sendError(req, res, err, requestId);
    }
  }

  /** What the verifier and the routes need of one request, with path and query as S3 reads them. */
  interface S3Request {
    method: string;
    /** The raw path, as sent. */
    rawPath: string;
    /** Query pairs, decoded, in order. */
    query: Array<[string, string]>;
    /** Lower-case header name to its values, in order. */
    headers: Map<string, string[]>;
    body: Buffer;
    bucket: string;
    /** Empty for a bucket operation. */
    key: string;
  }

  function parseRequest(req: IncomingMessage, body: Buffer): S3Request {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const rawPath = q === -1 ? url : url.slice(0, q);
    const query = parseQuery(q === -1 ? '' : url.slice(q + 1));
    const headers = new Map<string, string[]>();
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
      const name = req.rawHeaders[i]!.toLowerCase();
      headers.set(name, [...(headers.get(name) ?? []), req.rawHeaders[i + 1]!]);
    }
    const path = decodeOrFault(rawPath, 'InvalidURI', "Couldn't parse the specified URI.");
    const hostName = (headers.get('host')?.[0] ?? '').replace(/:\d+$/, '');
    const virtual = bucketNames.find((b) => hostName.startsWith(`${b}.`));
    let bucket: string;
    let key: string;
    if (virtual !== undefined) {
      bucket = virtual;
      key = path.slice(1);
    } else {
      const slash = path.indexOf('/', 1);
      bucket = slash === -1 ? path.slice(1) : path.slice(1, slash);
      key = slash === -1 ? '' : path.slice(slash + 1);
    }
    return { method: req.method ?? 'GET', rawPath, query, headers, body, bucket, key };
  }

  function authenticate(r: S3Request): void {
    const has = (name: string) => r.query.some(([k]) => k === name);
    if (has('X-Amz-Algorithm') || has('X-Amz-Signature') || has('X-Amz-Credential')) verifyQuery(r);
    else if (r.headers.has('authorization')) verifyHeader(r);
    else throw accessDenied();
  }

  function verifyHeader(r: S3Request): void {
    const header = r.headers.get('authorization')![0]!;
    const algorithm = 'AWS4-HMAC-SHA256 ';
    if (!header.startsWith(algorithm)) {
      throw new S3Fault(400, 'InvalidArgument', 'Unsupported Authorization Type', [
        ['ArgumentName', 'Authorization'],
        ['ArgumentValue', header.split(' ')[0] ?? ''],
      ]);
    }
    const fields = new Map<string, string>();
    for (const part of header.slice(algorithm.length).split(',')) {
      const eq = part.indexOf('=');
      if (eq > 0) fields.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
    }
    const credential = fields.get('Credential');
    const signedHeaders = fields.get('SignedHeaders');
    const signature = fields.get('Signature');
    if (!credential || !signedHeaders || !signature) {
      throw new S3Fault(
        400,
        'AuthorizationHeaderMalformed',
        'The authorization header is malformed; the authorization header requires three components: Credential, SignedHeaders, and Signature.',
      );
    }
    const amzDate = r.headers.get('x-amz-date')?.[0];
    if (amzDate === undefined) {
      throw new S3Fault(403, 'AccessDenied', 'AWS authentication requires a valid Date or x-amz-date header');
    }
    const payloadHash = r.headers.get('x-amz-content-sha256')?.[0];
    if (payloadHash === undefined) {
      throw new S3Fault(
        400,
        'InvalidRequest',
        'Missing required header for this request: x-amz-content-sha256',
      );
    }
    const scope = checkCredential(
      credential,
      amzDate,
      'AuthorizationHeaderMalformed',
      'The authorization header is malformed;',
    );
    const requestTime = parseAmzDate(amzDate);
    if (requestTime === undefined) {
      throw new S3Fault(403, 'AccessDenied', 'AWS authentication requires a valid Date or x-amz-date header');
    }
    if (Math.abs(requestTime - now()) > MAX_SKEW_SECONDS) {
      throw new S3Fault(
        403,
        'RequestTimeTooSkewed',
        'The difference between the request time and the current time is too large.',
        [
          ['RequestTime', amzDate],
          ['ServerTime', new Date(now() * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z')],
          ['MaxAllowedSkewMilliseconds', String(MAX_SKEW_SECONDS * 1000)],
        ],
      );
    }
    checkAllAmzHeadersSigned(r, signedHeaders);
    const canonical = canonicalRequest(r, signedHeaders, payloadHash, undefined);
    checkSignature(canonical, amzDate, scope, signature);
    if (payloadHash !== 'UNSIGNED-PAYLOAD') {
      if (payloadHash.startsWith('STREAMING-')) {
        throw new S3Fault(
          501,
          'NotImplemented',
          'A header you provided implies functionality that is not implemented',
          [['Header', 'x-amz-content-sha256']],
        );
      }
      const computed = createHash('sha256').update(r.body).digest('hex');
      if (computed !== payloadHash) {
        throw new S3Fault(
          400,
          'XAmzContentSHA256Mismatch',
          "The provided 'x-amz-content-sha256' header does not match what was computed.",
          [
            ['ClientComputedContentSHA256', payloadHash],
            ['S3ComputedContentSHA256', computed],
          ],
        );
      }
    }
  }

  function verifyQuery(r: S3Request): void {
    const param = (name: string) => r.query.find(([k]) => k === name)?.[1];
    const bad = (message: string) => new S3Fault(400, 'AuthorizationQueryParametersError', message);
    if (param('X-Amz-Algorithm') !== 'AWS4-HMAC-SHA256') {
      throw bad('X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"');
    }
    const credential = param('X-Amz-Credential');
    const amzDate = param('X-Amz-Date');
    const expires = param('X-Amz-Expires');
    const signedHeaders = param('X-Amz-SignedHeaders');
    const signature = param('X-Amz-Signature');
    if (!credential || !amzDate || !expires || !signedHeaders || !signature) {
      throw bad(
        'Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.',
      );
    }
    const scope = checkCredential(
      credential,
      amzDate,
      'AuthorizationQueryParametersError',
      'Error parsing the X-Amz-Credential parameter;',
    );
    if (!/^\d+$/.test(expires)) throw bad('X-Amz-Expires should be a number');
    const seconds = Number(expires);
    if (seconds > MAX_PRESIGN_SECONDS) {
      throw bad('X-Amz-Expires must be less than a week (in seconds) that is 604800');
    }
    const signedAt = parseAmzDate(amzDate);
    if (signedAt === undefined)
      throw bad("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"");
    if (signedAt > now() + MAX_SKEW_SECONDS)
      throw new S3Fault(403, 'AccessDenied', 'Request is not valid yet');
    if (now() > signedAt + seconds) {
      throw new S3Fault(403, 'AccessDenied', 'Request has expired', [
        ['X-Amz-Expires', expires],
        ['Expires', isoSeconds(signedAt + seconds)],
        ['ServerTime', isoSeconds(now())],
      ]);
    }
    checkAllAmzHeadersSigned(r, signedHeaders);
    const payloadHash = param('X-Amz-Content-Sha256') ?? 'UNSIGNED-PAYLOAD';
    const canonical = canonicalRequest(r, signedHeaders, payloadHash, 'X-Amz-Signature');
    checkSignature(canonical, amzDate, scope, signature);
  }

  /** Checks `AKID/yyyymmdd/region/s3/aws4_request` against the keys, the date and the region; returns the scope. */
  function checkCredential(credential: string, amzDate: string, code: string, malformed: string): string {
    const parts = credential.split('/');
    if (parts.length !== 5 || parts[4] !== 'aws4_request') {
      throw new S3Fault(
        400,
        code,
        `${malformed} the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".`,
      );
    }
    const [akid, date, scopeRegion, service] = parts as [string, string, string, string, string];
    if (akid !== accessKeyId) {
      throw new S3Fault(
        403,
        'InvalidAccessKeyId',
        'The AWS Access Key Id you provided does not exist in our records.',
        [['AWSAccessKeyId', akid]],
      );
    }
    if (date !== amzDate.slice(0, 8)) {
      throw new S3Fault(
        400,
        code,
        `${malformed} incorrect date format "${date}". This date in the credential must be in the format "yyyyMMdd".`,
      );
    }
    if (scopeRegion !== region) {
      throw new S3Fault(
        400,
        code,
        `${malformed} the region '${scopeRegion}' is wrong; expecting '${region}'`,
        [['Region', region]],
      );
    }
    if (service !== 's3') {
      throw new S3Fault(
        400,
        code,
        `${malformed} incorrect service "${service}". This endpoint belongs to "s3".`,
      );
    }
    return parts.slice(1).join('/');
  }

  function checkAllAmzHeadersSigned(r: S3Request, signedHeaders: string): void {
    const signed = new Set(signedHeaders.split(';'));
    const unsigned = [...r.headers.keys()].filter((h) => h.startsWith('x-amz-') && !signed.has(h));
    if (!signed.has('host') || unsigned.length > 0) {
      throw new S3Fault(
        403,
        'AccessDenied',
        'There were headers present in the request which were not signed',
        [['HeadersNotSigned', signed.has('host') ? unsigned.join(', ') : 'host']],
      );
    }
  }

  function checkSignature(canonical: string, amzDate: string, scope: string, provided: string): void {
    const stringToSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256Hex(canonical)].join('\n');
    const [date, scopeRegion, service] = scope.split('/') as [string, string, string];
    const expected = signatureV4(secretAccessKey, date, scopeRegion, service, stringToSign);
    const a = Buffer.from(expected);
    const b = Buffer.from(provided);
    if (a.length !== b.length || !timingSafeEqual(a, b)) {
      throw new S3Fault(
        403,
        'SignatureDoesNotMatch',
        'The request signature we calculated does not match the signature you provided. Check your key and signing method.',
        [
          ['AWSAccessKeyId', accessKeyId],
          ['StringToSign', stringToSign],
          ['SignatureProvided', provided],
          ['StringToSignBytes', hexBytes(stringToSign)],
          ['CanonicalRequest', canonical],
          ['CanonicalRequestBytes', hexBytes(canonical)],
        ],
      );
    }
  }

  function route(r: S3Request, res: ServerResponse): void {
    const objects = buckets.get(r.bucket);
    if (objects === undefined) {
      throw new S3Fault(404, 'NoSuchBucket', 'The specified bucket does not exist', [
        ['BucketName', r.bucket],
      ]);
    }
    const has = (name: string) => r.query.some(([k]) => k === name);
    if (r.key === '') {
      if (r.method === 'GET' && r.query.some(([k, v]) => k === 'list-type' && v === '2')) {
        listObjectsV2(r, objects, res);
      } else if (r.method === 'POST' && has('delete')) {
        deleteObjects(r, objects, res);
      } else {
        throw notImplemented();
      }
      return;
    }
    switch (r.method) {
      case 'PUT':
        putObject(r, objects, res);
        return;
      case 'GET':
      case 'HEAD':
        getObject(r, objects, res);
        return;
      case 'DELETE':
        objects.delete(r.key);
        res.writeHead(204).end();
        return;
      default:
        throw new S3Fault(
          405,
          'MethodNotAllowed',
          'The specified method is not allowed against this resource.',
          [
            ['Method', r.method],
            ['ResourceType', 'OBJECT'],
          ],
        );
    }
  }

  function putObject(r: S3Request, objects: Map<string, FakeS3Object>, res: ServerResponse): void {
    if (!r.headers.has('content-length')) {
      throw new S3Fault(411, 'MissingContentLength', 'You must provide the Content-Length HTTP header.');
    }
    checkContentMd5(r, false);
    const object = makeObject(r.body, r.headers.get('content-type')?.[0] ?? 'binary/octet-stream');
    objects.set(r.key, object);
    res.writeHead(200, { etag: object.etag, 'content-length': '0' }).end();
  }

  function getObject(r: S3Request, objects: Map<string, FakeS3Object>, res: ServerResponse): void {
    const object = objects.get(r.key);
    if (object === undefined) {
      throw new S3Fault(404, 'NoSuchKey', 'The specified key does not exist.', [['Key', r.key]]);
    }
    const headers: Record<string, string> = {
      'content-type': object.contentType,
      etag: object.etag,
      'last-modified': new Date(object.lastModified).toUTCString(),
      'accept-ranges': 'bytes',
    };
    let body = object.body;
    let status = 200;
    const range = /^bytes=(\d+)-(\d*)$/.exec(r.headers.get('range')?.[0] ?? '');
    if (range && Number(range[1]) < object.body.length) {
      const start = Number(range[1]);
      const end = Math.min(range[2] ? Number(range[2]) : object.body.length - 1, object.body.length - 1);
      body = object.body.subarray(start, end + 1);
      headers['content-range'] = `bytes ${start}-${end}/${object.body.length}`;
      status = 206;
    }
    headers['content-length'] = String(body.length);
    res.writeHead(status, headers);
    res.end(r.method === 'HEAD' ? undefined : body);
  }

  function listObjectsV2(r: S3Request, objects: Map<string, FakeS3Object>, res: ServerResponse): void {
    const param = (name: string) => r.query.find(([k]) => k === name)?.[1];
    if (param('delimiter') !== undefined) throw notImplemented();
    const prefix = param('prefix') ?? '';
    const encodingType = param('encoding-type');
    if (encodingType !== undefined && encodingType !== 'url') {
      throw new S3Fault(400, 'InvalidArgument', 'Invalid Encoding Method specified in Request', [
        ['ArgumentName', 'encoding-type'],
        ['ArgumentValue', encodingType],
      ]);
    }
    const maxKeysParam = param('max-keys');
    if (maxKeysParam !== undefined && !/^\d+$/.test(maxKeysParam)) {
      throw new S3Fault(400, 'InvalidArgument', 'Provided max-keys not an integer or within integer range', [
        ['ArgumentName', 'max-keys'],
        ['ArgumentValue', maxKeysParam],
      ]);
    }
    const maxKeys = Math.min(maxKeysParam === undefined ? MAX_KEYS : Number(maxKeysParam), MAX_KEYS);
    const token = param('continuation-token');
    let after = param('start-after') ?? '';
    if (token !== undefined) {
      const decoded = Buffer.from(token, 'base64').toString('utf8');
      if (!token || !decoded.startsWith('fake1:')) {
        throw new S3Fault(400, 'InvalidArgument', 'The continuation token provided is incorrect', [
          ['ArgumentName', 'continuation-token'],
        ]);
      }
      after = decoded.slice('fake1:'.length);
    }
    // S3 lists in UTF-8 binary order.
    const keys = [...objects.keys()]
      .filter((k) => k.startsWith(prefix) && Buffer.compare(Buffer.from(k), Buffer.from(after)) > 0)
      .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    const page = keys.slice(0, maxKeys);
    const truncated = keys.length > page.length;
    const enc = (s: string) => xmlEscape(encodingType === 'url' ? s3UrlEncode(s) : s);
    let xml = `${XML_DECLARATION}<ListBucketResult xmlns="${S3_NAMESPACE}"><Name>${r.bucket}</Name>`;
    xml += prefix === '' ? '<Prefix></Prefix>' : `<Prefix>${enc(prefix)}</Prefix>`;
    if (token !== undefined) xml += `<ContinuationToken>${xmlEscape(token)}</ContinuationToken>`;
    if (truncated) {
      const next = Buffer.from(`fake1:${page[page.length - 1]}`).toString('base64');
      xml += `<NextContinuationToken>${next}</NextContinuationToken>`;
    }
    xml += `<KeyCount>${page.length}</KeyCount><MaxKeys>${maxKeys}</MaxKeys>`;
    if (encodingType) xml += `<EncodingType>${encodingType}</EncodingType>`;
    xml += `<IsTruncated>${truncated}</IsTruncated>`;
    for (const key of page) {
      const o = objects.get(key)!;
      xml +=
        `<Contents><Key>${enc(key)}</Key><LastModified>${new Date(o.lastModified).toISOString()}</LastModified>` +
        `<ETag>${xmlEscape(o.etag)}</ETag><Size>${o.body.length}</Size><StorageClass>STANDARD</StorageClass></Contents>`;
    }
    xml += '</ListBucketResult>';
    sendXml(res, 200, xml);
  }

  function deleteObjects(r: S3Request, objects: Map<string, FakeS3Object>, res: ServerResponse): void {
    checkContentMd5(r, true);
    const text = r.body.toString('utf8');
    const root = /<Delete(?:\s[^>]*)?>([\s\S]*)<\/Delete>\s*$/.exec(text);
    const keys = [...(root?.[1] ?? '').matchAll(/<Object>\s*<Key>([^<]*)<\/Key>[\s\S]*?<\/Object>/g)].map(
      (m) => xmlUnescape(m[1]!),
    );
    if (!root || keys.length === 0 || keys.length > MAX_KEYS) {
      throw new S3Fault(
        400,
        'MalformedXML',
        'The XML you provided was not well-formed or did not validate against our published schema',
      );
    }
    const quiet = /<Quiet>\s*true\s*<\/Quiet>/i.test(root[1]!);
    let xml = `${XML_DECLARATION}<DeleteResult xmlns="${S3_NAMESPACE}">`;
    for (const key of keys) {
      if (denyDelete.has(key)) {
        xml += `<Error><Key>${xmlEscape(key)}</Key><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`;
        continue;
      }
      objects.delete(key);
      if (!quiet) xml += `<Deleted><Key>${xmlEscape(key)}</Key></Deleted>`;
    }
    xml += '</DeleteResult>';
    sendXml(res, 200, xml);
  }

  function checkContentMd5(r: S3Request, required: boolean): void {
    const md5 = r.headers.get('content-md5')?.[0];
    if (md5 === undefined) {
      if (required)
        throw new S3Fault(400, 'InvalidRequest', 'Missing required header for this request: Content-Md5.');
      return;
    }
    const computed = createHash('md5').update(r.body).digest('base64');
    if (!/^[A-Za-z0-9+/]{22}==$/.test(md5)) {
      throw new S3Fault(400, 'InvalidDigest', 'The Content-MD5 you specified was invalid.', [
        ['Content-MD5', md5],
      ]);
    }
    if (md5 !== computed) {
      throw new S3Fault(400, 'BadDigest', 'The Content-MD5 you specified did not match what we received.', [
        ['ExpectedDigest', md5],
        ['CalculatedDigest', computed],
      ]);
    }
  }

  function makeObject(body: Buffer, contentType: string): FakeS3Object {
    return {
      body,
      contentType,
      etag: `"${createHash('md5').update(body).digest('hex')}"`,
      lastModified: now() * 1000,
    };
  }

  function objectsOf(bucket: string): Map<string, FakeS3Object> {
    const objects = buckets.get(bucket);
    if (objects === undefined) throw new Error(`fake S3 has no bucket ${bucket}`);
    return objects;
  }

  return {
    ...server,
    accessKeyId,
    secretAccessKey,
    region,
    bucket: bucketNames[0]!,
    denyDelete,
    objects: (bucket = bucketNames[0]!) => objectsOf(bucket),
    seed(key, body, contentType = 'application/octet-stream', bucket = bucketNames[0]!) {
      objectsOf(bucket).set(key, makeObject(Buffer.from(body), contentType));
    },
    now,
    advanceClock(seconds) {
      offset += seconds;
    },
    setClock(epochSeconds) {
      pinned = epochSeconds;
      offset = 0;
    },
  };
}

/**
 * The SigV4 signature of `stringToSign`: HMAC chain over date, region, service and `aws4_request`
 * (AWS's "Calculating a Signature"), hex. Exported so the tests can check it on AWS's published examples.
 */
export function signatureV4(
  secret: string,
  date: string,
  region: string,
  service: string,
  stringToSign: string,
): string {
  const kDate = createHmac('sha256', `AWS4${secret}`).update(date).digest();
  const kRegion = createHmac('sha256', kDate).update(region).digest();
  const kService = createHmac('sha256', kRegion).update(service).digest();
  const kSigning = createHmac('sha256', kService).update('aws4_request').digest();
  return createHmac('sha256', kSigning).update(stringToSign).digest('hex');
}

/**
 * S3's canonical request: the method; the path URI-encoded once (S3 does not normalise or double-encode
 * it); the query pairs re-encoded and sorted by name, then value (without `omit`, the signature itself in
 * query auth); each signed header `name:value` with whitespace folded; the signed header list; the
 * payload hash.
 */
function canonicalRequest(
  r: { method: string; rawPath: string; query: Array<[string, string]>; headers: Map<string, string[]> },
  signedHeaders: string,
  payloadHash: string,
  omit: string | undefined,
): string {
  const path = decodeOrFault(r.rawPath, 'InvalidURI', "Couldn't parse the specified URI.");
  const canonicalUri = path
    .split('/')
    .map((segment) => uriEncode(segment))
    .join('/');
  const canonicalQuery = r.query
    .filter(([k]) => k !== omit)
    .map(([k, v]) => [uriEncode(k), uriEncode(v)] as const)
    .sort(([k1, v1], [k2, v2]) => (k1 < k2 ? -1 : k1 > k2 ? 1 : v1 < v2 ? -1 : v1 > v2 ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
  const names = signedHeaders.split(';');
  const canonicalHeaders = names
    .map((name) => {
      const values = (r.headers.get(name) ?? []).map((v) => v.trim().replace(/\s+/g, ' '));
      return `${name}:${values.join(',')}\n`;
    })
    .join('');
  return [r.method, canonicalUri || '/', canonicalQuery, canonicalHeaders, signedHeaders, payloadHash].join(
    '\n',
  );
}

/** RFC 3986 percent-encoding of everything but unreserved characters, as SigV4 specifies. */
function uriEncode(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

/** S3's `encoding-type=url` for keys in listings: form-style, `/` kept. */
function s3UrlEncode(value: string): string {
  return encodeURIComponent(value).replace(/%2F/g, '/').replace(/%20/g, '+');
}

function parseQuery(raw: string): Array<[string, string]> {
  if (raw === '') return [];
  return raw.split('&').map((pair) => {
    const eq = pair.indexOf('=');
    const name = eq === -1 ? pair : pair.slice(0, eq);
    const value = eq === -1 ? '' : pair.slice(eq + 1);
    const msg = 'The request contains an invalid query string.';
    return [decodeOrFault(name, 'InvalidArgument', msg), decodeOrFault(value, 'InvalidArgument', msg)];
  });
}

function decodeOrFault(value: string, code: string, message: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw new S3Fault(400, code, message);
  }
}

/** `yyyyMMddTHHmmssZ` to epoch seconds. */
function parseAmzDate(value: string): number | undefined {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(value);
  if (!m) return undefined;
  const [, y, mo, d, h, mi, s] = m.map(Number) as [number, number, number, number, number, number, number];
  return Date.UTC(y, mo - 1, d, h, mi, s) / 1000;
}

function isoSeconds(epochSeconds: number): string {
  return new Date(epochSeconds * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

function hexBytes(text: string): string {
  return [...Buffer.from(text, 'utf8')].map((b) => b.toString(16).padStart(2, '0')).join(' ');
}

function notImplemented(): S3Fault {
  return new S3Fault(
    501,
    'NotImplemented',
    'A header you provided implies functionality that is not implemented',
  );
}

function xmlEscape(value: string): string {
  return value
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;')
    .replace(/\r/g, '&#13;');
}

function xmlUnescape(value: string): string {
  return value.replace(/&(#x[0-9a-fA-F]+|#\d+|amp|lt|gt|quot|apos);/g, (_, entity: string) => {
    if (entity.startsWith('#x')) return String.fromCodePoint(Number.parseInt(entity.slice(2), 16));
    if (entity.startsWith('#')) return String.fromCodePoint(Number(entity.slice(1)));
    return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[entity]!;
  });
}

function sendXml(res: ServerResponse, status: number, xml: string): void {
  res.writeHead(status, {
    'content-type': 'application/xml',
    'content-length': String(Buffer.byteLength(xml)),
  });
  res.end(xml);
}

/** S3's error document; HEAD answers carry no body, as S3's do. */
function sendError(req: IncomingMessage, res: ServerResponse, fault: S3Fault, requestId: string): void {
  const extra = fault.extra.map(([name, value]) => `<${name}>${xmlEscape(value)}</${name}>`).join('');
  const xml =
    `${XML_DECLARATION}<Error><Code>${fault.code}</Code><Message>${xmlEscape(fault.message)}</Message>` +
    `${extra}<RequestId>${requestId}</RequestId><HostId>${randomBytes(48).toString('base64')}</HostId></Error>`;
  if (req.method === 'HEAD') {
    res.writeHead(fault.status, { 'content-type': 'application/xml' }).end();
    return;
  }
  sendXml(res, fault.status, xml);
}
