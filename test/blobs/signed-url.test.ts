import { describe, expect, it } from 'vitest';
import { blobSignature, signBlobUrl, verifyBlobSignature } from '../../src/blobs/signed-url.js';

const SECRET = 'unit-test-secret-0123456789abcdef';
const KEY = '3f2b9c1e-7a44-4c1e-9d51-0c6b8e2f4a10/output_0.png';
const NOW = 1_900_000_000;

function parts(url: string): { path: string; expires: string; signature: string } {
  const u = new URL(url);
  return {
    path: u.pathname,
    expires: u.searchParams.get('expires')!,
    signature: u.searchParams.get('signature')!,
  };
}

describe('signBlobUrl', () => {
  it('builds <base>/v1/files/<key>?expires=…&signature=… with a base64url signature', () => {
    const url = signBlobUrl({
      baseUrl: 'https://api.example.com/',
      key: KEY,
      expiresAt: NOW + 60,
      secret: SECRET,
    });
    expect(url).toMatch(
      /^https:\/\/api\.example\.com\/v1\/files\/3f2b9c1e-7a44-4c1e-9d51-0c6b8e2f4a10\/output_0\.png\?expires=1900000060&signature=[A-Za-z0-9_-]{43}$/,
    );
  });

  it('keeps a path prefix of the base URL', () => {
    const url = signBlobUrl({
      baseUrl: 'https://example.com/gantry',
      key: KEY,
      expiresAt: NOW,
      secret: SECRET,
    });
    expect(new URL(url).pathname).toBe(`/gantry/v1/files/${KEY}`);
  });

  it('refuses unsafe keys, weak secrets and odd expiries', () => {
    const base = { baseUrl: 'https://x.test', key: KEY, expiresAt: NOW, secret: SECRET };
    expect(() => signBlobUrl({ ...base, key: '../etc/passwd' })).toThrow(/Invalid blob key/);
    expect(() => signBlobUrl({ ...base, secret: 'short' })).toThrow(/at least 16 bytes/);
    expect(() => signBlobUrl({ ...base, expiresAt: 1.5 })).toThrow(/epoch seconds/);
    expect(() => signBlobUrl({ ...base, expiresAt: -1 })).toThrow(/epoch seconds/);
  });
});

describe('verifyBlobSignature', () => {
  const signed = parts(
    signBlobUrl({ baseUrl: 'https://x.test', key: KEY, expiresAt: NOW + 60, secret: SECRET }),
  );

  it('accepts its own links until they expire, and reports the expiry', () => {
    expect(verifyBlobSignature(KEY, signed.expires, signed.signature, SECRET, NOW)).toEqual({
      valid: true,
      expiresAt: NOW + 60,
    });
    expect(verifyBlobSignature(KEY, Number(signed.expires), signed.signature, SECRET, NOW + 59).valid).toBe(
      true,
    );
  });

  it('says expired only for an authentic link at or after its expiry', () => {
    expect(verifyBlobSignature(KEY, signed.expires, signed.signature, SECRET, NOW + 60)).toEqual({
      valid: false,
      reason: 'expired',
    });
  });

  it('says invalid for any change to key, expiry, signature or secret', () => {
    const invalid = { valid: false, reason: 'invalid' };
    const flipped = `${signed.signature.slice(0, -1)}${signed.signature.endsWith('A') ? 'B' : 'A'}`;
    expect(verifyBlobSignature(KEY, signed.expires, flipped, SECRET, NOW)).toEqual(invalid);
    expect(verifyBlobSignature(`${KEY}x`, signed.expires, signed.signature, SECRET, NOW)).toEqual(invalid);
    // A pushed-back expiry is a forgery, not an expired link, even long after the real expiry.
    expect(verifyBlobSignature(KEY, String(NOW + 10_000), signed.signature, SECRET, NOW + 100)).toEqual(
      invalid,
    );
    expect(verifyBlobSignature(KEY, signed.expires, signed.signature, `${SECRET}!`, NOW)).toEqual(invalid);
  });

  it('says invalid for missing or malformed values without throwing', () => {
    const invalid = { valid: false, reason: 'invalid' };
    const good = signed.signature;
    expect(verifyBlobSignature(KEY, undefined, good, SECRET, NOW)).toEqual(invalid);
    expect(verifyBlobSignature(KEY, signed.expires, undefined, SECRET, NOW)).toEqual(invalid);
    expect(verifyBlobSignature(KEY, '', good, SECRET, NOW)).toEqual(invalid);
    expect(verifyBlobSignature(KEY, '1e12', good, SECRET, NOW)).toEqual(invalid);
    expect(verifyBlobSignature(KEY, ` ${signed.expires}`, good, SECRET, NOW)).toEqual(invalid);
    expect(verifyBlobSignature(KEY, signed.expires, good.slice(1), SECRET, NOW)).toEqual(invalid);
    expect(verifyBlobSignature(KEY, signed.expires, `${good}=`, SECRET, NOW)).toEqual(invalid);
    // Standard base64 ('+', '/') is not the URL's alphabet.
    expect(verifyBlobSignature(KEY, signed.expires, '+'.repeat(43), SECRET, NOW)).toEqual(invalid);
  });

  it('blobSignature is what the URL carries', () => {
    expect(blobSignature(KEY, signed.expires, SECRET)).toBe(signed.signature);
  });
});
