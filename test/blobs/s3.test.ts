import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { inspect } from 'node:util';
import { AwsV4Signer } from 'aws4fetch';
import { request } from 'undici';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { S3BlobStore, type S3BlobStoreOptions, S3Error } from '../../src/blobs/s3.js';
import { EMPTY_SHA256, type FakeS3, startFakeS3 } from '../helpers/fake-s3.js';

/** AWS's example credentials and request time, from the SigV4 examples in the S3 API reference. */
const AWS_EXAMPLE = {
  accessKeyId: 'AKIAIOSFODNN7EXAMPLE',
  secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
  region: 'us-east-1',
  bucket: 'examplebucket',
  time: Date.UTC(2013, 4, 24) / 1000,
};

/** The text of the first `<tag>` in an S3 XML document. */
function xmlField(xml: string, tag: string): string | undefined {
  return new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`).exec(xml)?.[1];
}

/** A raw HTTP/1.1 request to the fake with exactly these headers (Host included), as AWS's examples are. */
function rawRequest(
  origin: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  const { hostname, port } = new URL(origin);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ hostname, port, path, method: 'GET', headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts).toString() }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('fake S3 checks signatures as S3 does (AWS published SigV4 examples)', () => {
  let s3: FakeS3;
  beforeEach(async () => {
    s3 = await startFakeS3({
      accessKeyId: AWS_EXAMPLE.accessKeyId,
      secretAccessKey: AWS_EXAMPLE.secretAccessKey,
      region: AWS_EXAMPLE.region,
      buckets: [AWS_EXAMPLE.bucket],
    });
    s3.setClock(AWS_EXAMPLE.time);
    s3.seed('test.txt', 'Welcome to Amazon S3.', 'text/plain');
  });
  afterEach(async () => {
    vi.useRealTimers();
    await s3.close();
  });

  // "Example: GET Object" (header auth): the documented canonical request and signature.
  const GET_CANONICAL = [
    'GET',
    '/test.txt',
    '',
    'host:examplebucket.s3.amazonaws.com',
    'range:bytes=0-9',
    `x-amz-content-sha256:${EMPTY_SHA256}`,
    'x-amz-date:20130524T000000Z',
    '',
    'host;range;x-amz-content-sha256;x-amz-date',
    EMPTY_SHA256,
  ].join('\n');
  const getHeaders = (signature: string) => ({
    Host: 'examplebucket.s3.amazonaws.com',
    Range: 'bytes=0-9',
    'x-amz-content-sha256': EMPTY_SHA256,
    'x-amz-date': '20130524T000000Z',
    Authorization:
      'AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,' +
      `SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=${signature}`,
  });
  const GET_SIGNATURE = 'f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41';

  it('accepts the documented header-signed GET and serves the range', async () => {
    const res = await rawRequest(s3.origin, '/test.txt', getHeaders(GET_SIGNATURE));
    expect(res.status).toBe(206);
    expect(res.body).toBe('Welcome to');
    expect(res.headers['content-range']).toBe('bytes 0-9/21');
  });

  it('refuses it with a changed signature, with the documented canonical request in the 403', async () => {
    const res = await rawRequest(s3.origin, '/test.txt', getHeaders(`${GET_SIGNATURE.slice(0, -1)}0`));
    expect(res.status).toBe(403);
    expect(
      res.body.startsWith(
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SignatureDoesNotMatch</Code>',
      ),
    ).toBe(true);
    expect(xmlField(res.body, 'CanonicalRequest')).toBe(GET_CANONICAL);
    expect(xmlField(res.body, 'StringToSign')).toBe(
      'AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n' +
        '7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972',
    );
  });

  it('refuses the documented request once a signed header changed, or 16 minutes later', async () => {
    const changed = await rawRequest(s3.origin, '/test.txt', {
      ...getHeaders(GET_SIGNATURE),
      Range: 'bytes=0-10',
    });
    expect(changed.status).toBe(403);
    expect(xmlField(changed.body, 'Code')).toBe('SignatureDoesNotMatch');
    s3.advanceClock(16 * 60);
    const late = await rawRequest(s3.origin, '/test.txt', getHeaders(GET_SIGNATURE));
    expect(late.status).toBe(403);
    expect(xmlField(late.body, 'Code')).toBe('RequestTimeTooSkewed');
  });

  // "Authenticating Requests: Using Query Parameters": the documented pre-signed URL.
  const PRESIGNED =
    '/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256' +
    '&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request' +
    '&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host' +
    '&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404';
  const host = { Host: 'examplebucket.s3.amazonaws.com' };

  it('accepts the documented pre-signed URL for its 86400 seconds, then says it expired', async () => {
    s3.advanceClock(86_400);
    const ok = await rawRequest(s3.origin, PRESIGNED, host);
    expect(ok.status).toBe(200);
    expect(ok.body).toBe('Welcome to Amazon S3.');
    s3.advanceClock(1);
    const expired = await rawRequest(s3.origin, PRESIGNED, host);
    expect(expired.status).toBe(403);
    expect(xmlField(expired.body, 'Code')).toBe('AccessDenied');
    expect(xmlField(expired.body, 'Message')).toBe('Request has expired');
    expect(xmlField(expired.body, 'Expires')).toBe('2013-05-25T00:00:00Z');
  });

  it('refuses the documented pre-signed URL for another key or with a longer expiry', async () => {
    s3.seed('test2.txt', 'other');
    const other = await rawRequest(s3.origin, PRESIGNED.replace('test.txt', 'test2.txt'), host);
    expect(other.status).toBe(403);
    expect(xmlField(other.body, 'Code')).toBe('SignatureDoesNotMatch');
    const longer = await rawRequest(s3.origin, PRESIGNED.replace('Expires=86400', 'Expires=86401'), host);
    expect(longer.status).toBe(403);
    const tooLong = await rawRequest(s3.origin, PRESIGNED.replace('Expires=86400', 'Expires=604801'), host);
    expect(tooLong.status).toBe(400);
    expect(xmlField(tooLong.body, 'Code')).toBe('AuthorizationQueryParametersError');
  });

  it('S3BlobStore pre-signs exactly the documented URL', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(AWS_EXAMPLE.time * 1000);
    const store = new S3BlobStore({ ...AWS_EXAMPLE, endpoint: 'https://s3.amazonaws.com' });
    // Valid while now < expiresAt: through second 86400 inclusive, which is X-Amz-Expires=86400.
    const url = new URL(await store.urlFor('test.txt', AWS_EXAMPLE.time + 86_401));
    await store.close();
    const expected = new URL(`https://examplebucket.s3.amazonaws.com${PRESIGNED}`);
    expect(url.origin + url.pathname).toBe(expected.origin + expected.pathname);
    expect([...url.searchParams].sort()).toEqual([...expected.searchParams].sort());
  });
});

describe('fake S3 refuses what S3 refuses', () => {
  let s3: FakeS3;
  beforeEach(async () => {
    s3 = await startFakeS3();
  });
  afterEach(async () => {
    await s3.close();
  });
  const signed = async (method: string, path: string, headers: Record<string, string>, body?: string) => {
    const signer = new AwsV4Signer({
      method,
      url: `${s3.origin}${path}`,
      headers,
      accessKeyId: s3.accessKeyId,
      secretAccessKey: s3.secretAccessKey,
      service: 's3',
      region: s3.region,
      ...(body === undefined ? {} : { body }),
    });
    const { url, headers: h } = await signer.sign();
    return { url, headers: Object.fromEntries(h) };
  };

  it('anonymous requests, unsigned x-amz headers, a body that does not match its hash, DeleteObjects without MD5', async () => {
    s3.seed('k.txt', 'x');
    const anonymous = await request(`${s3.origin}/${s3.bucket}/k.txt`);
    expect(anonymous.statusCode).toBe(403);
    expect(xmlField(await anonymous.body.text(), 'Code')).toBe('AccessDenied');

    const get = await signed('GET', `/${s3.bucket}/k.txt`, { 'x-amz-content-sha256': EMPTY_SHA256 });
    const unsigned = await request(get.url, { headers: { ...get.headers, 'x-amz-meta-extra': '1' } });
    expect(unsigned.statusCode).toBe(403);
    expect(await unsigned.body.text()).toContain('<HeadersNotSigned>x-amz-meta-extra</HeadersNotSigned>');

    const sha = createHash('sha256').update('signed body').digest('hex');
    const put = await signed('PUT', `/${s3.bucket}/k.txt`, { 'x-amz-content-sha256': sha });
    const swapped = await request(put.url, { method: 'PUT', headers: put.headers, body: 'other body!' });
    expect(swapped.statusCode).toBe(400);
    expect(xmlField(await swapped.body.text(), 'Code')).toBe('XAmzContentSHA256Mismatch');
    expect(s3.objects().get('k.txt')!.body.toString()).toBe('x');

    const xml = '<Delete><Object><Key>k.txt</Key></Object></Delete>';
    const xmlSha = createHash('sha256').update(xml).digest('hex');
    const del = await signed('POST', `/${s3.bucket}?delete`, { 'x-amz-content-sha256': xmlSha });
    const noMd5 = await request(del.url, { method: 'POST', headers: del.headers, body: xml });
    expect(noMd5.statusCode).toBe(400);
    expect(xmlField(await noMd5.body.text(), 'Message')).toBe(
      'Missing required header for this request: Content-Md5.',
    );
    expect(s3.objects().has('k.txt')).toBe(true);
  });
});

describe('S3BlobStore on a fake S3', () => {
  let s3: FakeS3;
  const stores: S3BlobStore[] = [];
  const makeStore = (overrides: Partial<S3BlobStoreOptions> = {}) => {
    const store = new S3BlobStore({
      endpoint: s3.origin,
      region: s3.region,
      bucket: s3.bucket,
      accessKeyId: s3.accessKeyId,
      secretAccessKey: s3.secretAccessKey,
      forcePathStyle: true,
      prefix: 'gantry/outputs',
      ...overrides,
    });
    stores.push(store);
    return store;
  };
  const now = () => Math.floor(Date.now() / 1000);
  const ops = (name: string) =>
    s3.requests.filter((r) => {
      if (name === 'DeleteObjects') return r.method === 'POST' && r.path.includes('?delete');
      if (name === 'ListObjectsV2') return r.method === 'GET' && r.path.includes('list-type=2');
      return r.method === name;
    });

  beforeEach(async () => {
    s3 = await startFakeS3();
  });
  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
    await s3.close();
  });

  describe('put', () => {
    it('stores the bytes and Content-Type under the prefix, signed, with Content-MD5 and the payload hash', async () => {
      const store = makeStore();
      const id = randomUUID();
      const data = randomBytes(50_000);
      expect(await store.put(`${id}/out.webp`, data, 'image/webp')).toEqual({
        key: `${id}/out.webp`,
        size: data.length,
        contentType: 'image/webp',
      });
      const object = s3.objects().get(`gantry/outputs/${id}/out.webp`)!;
      expect(object.body.equals(data)).toBe(true);
      expect(object.contentType).toBe('image/webp');
      const [put] = ops('PUT');
      expect(put!.path).toBe(`/${s3.bucket}/gantry/outputs/${id}/out.webp`);
      expect(put!.headers.authorization).toMatch(
        new RegExp(`^AWS4-HMAC-SHA256 Credential=${s3.accessKeyId}/\\d{8}/${s3.region}/s3/aws4_request, `),
      );
      expect(put!.headers['x-amz-content-sha256']).toMatch(/^[0-9a-f]{64}$/);
      expect(put!.headers['content-md5']).toMatch(/^[A-Za-z0-9+/]{22}==$/);
    });

    it('retries 503 SlowDown and a dropped connection, then gives up with S3’s error', async () => {
      const store = makeStore({ maxAttempts: 3 });
      s3.enqueue({ kind: 'error', status: 503, code: 'SlowDown' }, { kind: 'cut' });
      await store.put(`${randomUUID()}/a.png`, Buffer.from('x'), 'image/png');
      expect(ops('PUT')).toHaveLength(3);

      s3.setBehavior({
        kind: 'error',
        status: 500,
        code: 'InternalError',
        message: 'We encountered an internal error.',
      });
      const err = await store
        .put(`${randomUUID()}/b.png`, Buffer.from('x'), 'image/png')
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(S3Error);
      expect((err as S3Error).message).toMatch(
        /PutObject s3:\/\/gantry-outputs\/.*failed: 500 InternalError/,
      );
      expect(ops('PUT')).toHaveLength(6);
    });
  });

  describe('urlFor', () => {
    it('gives a path-style pre-signed GET that undici and fetch download with the right type', async () => {
      const store = makeStore();
      const id = randomUUID();
      const data = randomBytes(10_000);
      await store.put(`${id}/speech.mp3`, data, 'audio/mpeg');
      const expiresAt = now() + 900;
      const url = new URL(await store.urlFor(`${id}/speech.mp3`, expiresAt));
      expect(url.origin).toBe(s3.origin);
      expect(url.pathname).toBe(`/${s3.bucket}/gantry/outputs/${id}/speech.mp3`);
      expect(url.searchParams.get('X-Amz-Algorithm')).toBe('AWS4-HMAC-SHA256');
      expect(url.searchParams.get('X-Amz-SignedHeaders')).toBe('host');
      expect(url.searchParams.get('X-Amz-Credential')).toMatch(
        new RegExp(`^${s3.accessKeyId}/\\d{8}/${s3.region}/s3/aws4_request$`),
      );
      // Valid while now < expiresAt: X-Amz-Date + X-Amz-Expires is the last second it works.
      const signedAt = Date.parse(
        url.searchParams
          .get('X-Amz-Date')!
          .replace(/^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z$/, '$1-$2-$3T$4:$5:$6Z'),
      );
      expect(signedAt / 1000 + Number(url.searchParams.get('X-Amz-Expires'))).toBe(expiresAt - 1);
      expect(url.toString()).not.toContain(s3.secretAccessKey);
      expect(url.toString()).not.toContain(encodeURIComponent(s3.secretAccessKey));

      const viaUndici = await request(url);
      expect(viaUndici.statusCode).toBe(200);
      expect(viaUndici.headers['content-type']).toBe('audio/mpeg');
      expect(Buffer.from(await viaUndici.body.arrayBuffer()).equals(data)).toBe(true);
      const viaFetch = await fetch(url);
      expect(viaFetch.status).toBe(200);
      expect(viaFetch.headers.get('content-type')).toBe('audio/mpeg');
      expect(viaFetch.headers.get('content-length')).toBe(String(data.length));
      expect(Buffer.from(await viaFetch.arrayBuffer()).equals(data)).toBe(true);
    });

    it('stops working at expiresAt: S3 answers 403 Request has expired', async () => {
      const store = makeStore();
      const key = `${randomUUID()}/out.png`;
      await store.put(key, Buffer.from('png'), 'image/png');
      const expiresAt = now() + 60;
      const url = await store.urlFor(key, expiresAt);
      expect((await fetch(url)).status).toBe(200);
      s3.setClock(expiresAt - 1);
      expect((await fetch(url)).status).toBe(200);
      s3.setClock(expiresAt);
      const res = await fetch(url);
      expect(res.status).toBe(403);
      const body = await res.text();
      expect(xmlField(body, 'Code')).toBe('AccessDenied');
      expect(xmlField(body, 'Message')).toBe('Request has expired');
    });

    it('an expiresAt already past gives a URL that is already expired', async () => {
      const store = makeStore();
      const key = `${randomUUID()}/out.png`;
      await store.put(key, Buffer.from('png'), 'image/png');
      for (const past of [now() - 3600, now(), 1]) {
        const res = await fetch(await store.urlFor(key, past));
        expect(res.status).toBe(403);
        expect(xmlField(await res.text(), 'Message')).toBe('Request has expired');
      }
    });

    it('caps the lifetime at S3’s 7-day maximum', async () => {
      const store = makeStore();
      const key = `${randomUUID()}/out.png`;
      await store.put(key, Buffer.from('png'), 'image/png');
      const url = new URL(await store.urlFor(key, now() + 30 * 86_400));
      expect(url.searchParams.get('X-Amz-Expires')).toBe('604800');
      expect((await fetch(url)).status).toBe(200);
    });

    it('addresses the bucket virtual-hosted on AWS, and path-style when told or when it must', async () => {
      const base = {
        region: 'eu-west-1',
        accessKeyId: 'AKIDEXAMPLE',
        secretAccessKey: 'secret-example-0123',
      };
      const at = now() + 60;
      const path = async (options: S3BlobStoreOptions) => {
        const store = new S3BlobStore(options);
        const url = new URL(await store.urlFor('p1/out.png', at));
        await store.close();
        return url.origin + url.pathname;
      };
      expect(await path({ ...base, bucket: 'my-bucket' })).toBe(
        'https://my-bucket.s3.eu-west-1.amazonaws.com/p1/out.png',
      );
      expect(await path({ ...base, bucket: 'my-bucket', prefix: '/media/out/' })).toBe(
        'https://my-bucket.s3.eu-west-1.amazonaws.com/media/out/p1/out.png',
      );
      expect(await path({ ...base, bucket: 'my-bucket', forcePathStyle: true })).toBe(
        'https://s3.eu-west-1.amazonaws.com/my-bucket/p1/out.png',
      );
      expect(await path({ ...base, bucket: 'my.dotted.bucket' })).toBe(
        'https://s3.eu-west-1.amazonaws.com/my.dotted.bucket/p1/out.png',
      );
      expect(await path({ ...base, bucket: 'media', endpoint: 'http://10.0.0.5:9000' })).toBe(
        'http://10.0.0.5:9000/media/p1/out.png',
      );
      expect(await path({ ...base, bucket: 'media', endpoint: 'http://localhost:9000/' })).toBe(
        'http://localhost:9000/media/p1/out.png',
      );
      expect(
        await path({
          ...base,
          region: 'auto',
          bucket: 'media',
          endpoint: 'https://acc123.r2.cloudflarestorage.com',
        }),
      ).toBe('https://media.acc123.r2.cloudflarestorage.com/p1/out.png');
      expect(
        await path({
          ...base,
          bucket: 'media',
          endpoint: 'https://gw.example.com/s3/',
          forcePathStyle: true,
        }),
      ).toBe('https://gw.example.com/s3/media/p1/out.png');
    });
  });

  describe('credentials and errors', () => {
    it('a wrong secret fails put with S3’s SignatureDoesNotMatch, and the secret appears nowhere', async () => {
      const wrongSecret = 'wrong/Secret+Key0123456789abcdefghijKLMNOP';
      const store = makeStore({ secretAccessKey: wrongSecret });
      const err = await store
        .put(`${randomUUID()}/a.png`, Buffer.from('x'), 'image/png')
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(S3Error);
      const e = err as S3Error;
      expect(e).toMatchObject({ operation: 'PutObject', status: 403, code: 'SignatureDoesNotMatch' });
      expect(e.requestId).toMatch(/^[0-9A-F]{16}$/);
      expect(e.message).toMatch(
        /^S3 PutObject s3:\/\/gantry-outputs\/gantry\/outputs\/.*\/a\.png failed: 403 /,
      );
      expect(e.message).toMatch(/SignatureDoesNotMatch: The request signature we calculated does not match/);
      expect(e.message).toMatch(/check secretAccessKey/);
      for (const secret of [wrongSecret, s3.secretAccessKey]) {
        for (const text of [e.message, String(e.stack), inspect(e, { depth: 5 }), JSON.stringify(e)]) {
          expect(text).not.toContain(secret);
          expect(text).not.toContain(encodeURIComponent(secret));
        }
      }
      expect(s3.objects().size).toBe(0);
      // Every operation says so, not only put.
      await expect(store.deletePrefix(randomUUID())).rejects.toThrow(/403/);
      await expect(store.stat(`${randomUUID()}/a.png`)).rejects.toThrow(/HeadObject .* failed: 403/);
    });

    it('names a wrong access key id, a wrong region, a missing bucket and a skewed clock', async () => {
      const key = () => `${randomUUID()}/a.png`;
      const fail = (store: S3BlobStore) => store.put(key(), Buffer.from('x'), 'image/png');
      await expect(fail(makeStore({ accessKeyId: 'AKIAUNKNOWN000000000' }))).rejects.toThrow(
        /403 InvalidAccessKeyId: The AWS Access Key Id you provided does not exist/,
      );
      await expect(fail(makeStore({ region: 'us-east-2' }))).rejects.toThrow(
        /400 AuthorizationHeaderMalformed: .*the region 'us-east-2' is wrong; expecting 'eu-west-1' \(check region\)/,
      );
      await expect(fail(makeStore({ bucket: 'no-such-bucket' }))).rejects.toThrow(
        /404 NoSuchBucket: The specified bucket does not exist \(create the bucket/,
      );
      s3.advanceClock(3600);
      await expect(fail(makeStore())).rejects.toThrow(/403 RequestTimeTooSkewed: .*clock is off/);
    });

    it('keeps the secret out of the store object', () => {
      const store = makeStore();
      expect(inspect(store, { depth: 10, showHidden: true })).not.toContain(s3.secretAccessKey);
      expect(JSON.stringify(store)).not.toContain(s3.secretAccessKey);
    });

    it('refuses bad options at construction, naming the setting and never its value', () => {
      const secret = 'some/Secret+Value0123456789';
      const good: S3BlobStoreOptions = {
        region: 'us-east-1',
        bucket: 'b-1',
        accessKeyId: 'AKID',
        secretAccessKey: secret,
      };
      const bad: Array<[Partial<S3BlobStoreOptions>, RegExp]> = [
        [{ region: '' }, /S3 region is required/],
        [{ bucket: 'a/b' }, /S3 bucket is required/],
        [{ accessKeyId: `${secret} ` }, /S3 accessKeyId is required/],
        [{ secretAccessKey: `${secret} x` }, /S3 secretAccessKey is required/],
        [{ secretAccessKey: '' }, /S3 secretAccessKey is required/],
        [
          { endpoint: `https://AKID:${encodeURIComponent(secret)}@s3.example.com` },
          /S3 endpoint must have no credentials/,
        ],
        [{ endpoint: 'ftp://s3.example.com' }, /S3 endpoint must be an absolute http\(s\) URL/],
        [{ prefix: 'a/../b' }, /S3 prefix must be/],
        [{ pageSize: 1001 }, /S3 pageSize must be an integer from 1 to 1000/],
        [{ maxAttempts: 0 }, /S3 maxAttempts/],
      ];
      for (const [override, message] of bad) {
        let thrown: unknown;
        try {
          new S3BlobStore({ ...good, ...override });
        } catch (err) {
          thrown = err;
        }
        expect(thrown, JSON.stringify(Object.keys(override))).toBeInstanceOf(Error);
        expect((thrown as Error).message).toMatch(message);
        expect((thrown as Error).message).not.toContain(secret);
        expect((thrown as Error).message).not.toContain(encodeURIComponent(secret));
      }
    });

    it('stat returns null on 404 and explains a 403', async () => {
      const store = makeStore();
      const key = `${randomUUID()}/a.json`;
      expect(await store.stat(key)).toBeNull();
      await store.put(key, Buffer.from('{}'), 'application/json');
      expect(await store.stat(key)).toEqual({ key, size: 2, contentType: 'application/json' });
      s3.enqueue({ kind: 'error', status: 403, code: 'AccessDenied', message: 'Access Denied' });
      await expect(store.stat(key)).rejects.toThrow(/HeadObject .* failed: 403 Forbidden .*s3:ListBucket/);
    });

    it('refuses a fractional expiresAt, and fails every call after close', async () => {
      const store = makeStore();
      await expect(store.urlFor('p1/a.png', 1.5)).rejects.toThrow(/whole epoch seconds/);
      await store.close();
      await expect(store.put(`${randomUUID()}/a.png`, Buffer.from('x'), 'image/png')).rejects.toThrow(
        /closed/,
      );
      await store.close();
    });
  });

  describe('deletePrefix', () => {
    it('pages over 2,500 objects: three lists, three DeleteObjects of at most 1000 keys', async () => {
      const store = makeStore();
      const id = randomUUID();
      for (let i = 0; i < 2500; i++) s3.seed(`gantry/outputs/${id}/f-${String(i).padStart(4, '0')}.png`, 'x');
      s3.seed(`gantry/outputs/${id}-1/out.png`, 'sibling');
      s3.seed(`other/${id}/out.png`, 'outside the prefix');
      s3.seed(`gantry/outputs/${id}`, 'the blob named like the prefix');

      expect(await store.deletePrefix(id)).toBe(2501);
      expect([...s3.objects().keys()].sort()).toEqual([
        `gantry/outputs/${id}-1/out.png`,
        `other/${id}/out.png`,
      ]);
      expect(ops('ListObjectsV2')).toHaveLength(3);
      const batches = ops('DeleteObjects').map((r) => r.rawBody.toString().match(/<Object>/g)?.length);
      expect(batches).toEqual([1, 1000, 1000, 500]);
    });

    it('takes a smaller page size, and deletes keys that need encoding', async () => {
      const store = makeStore({ pageSize: 7 });
      const id = randomUUID();
      for (let i = 0; i < 30; i++) await store.put(`${id}/out_${i}.png`, Buffer.from([i]), 'image/png');
      // Objects written by something else, with characters a listing must URL-encode and XML must escape.
      for (const name of ['a b+c&d.txt', '<x>"y\'.txt', 'ümlaut €.txt', 'line\rbreak.txt']) {
        s3.seed(`gantry/outputs/${id}/foreign/${name}`, 'x');
      }
      expect(await store.deletePrefix(`${id}/`)).toBe(34);
      expect(s3.objects().size).toBe(0);
      const batches = ops('DeleteObjects').map((r) => r.rawBody.toString().match(/<Object>/g)?.length);
      expect(batches).toEqual([7, 7, 7, 7, 6]);
      expect(ops('ListObjectsV2').every((r) => r.path.includes('max-keys=7'))).toBe(true);
    });

    it('reports keys S3 refused to delete, and a second call deletes them', async () => {
      const store = makeStore();
      const id = randomUUID();
      for (const n of ['a', 'b', 'c']) await store.put(`${id}/${n}.png`, Buffer.from(n), 'image/png');
      s3.denyDelete.add(`gantry/outputs/${id}/b.png`);
      const err = await store.deletePrefix(id).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(S3Error);
      expect((err as S3Error).code).toBe('AccessDenied');
      expect((err as S3Error).message).toMatch(
        /could not delete 1 of 3 objects \(first: gantry\/outputs\/.*\/b\.png: AccessDenied: Access Denied\)/,
      );
      expect([...s3.objects().keys()]).toEqual([`gantry/outputs/${id}/b.png`]);
      s3.denyDelete.clear();
      expect(await store.deletePrefix(id)).toBe(1);
    });
  });
});
