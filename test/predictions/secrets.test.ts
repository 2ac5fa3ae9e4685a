import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadSecretKey, openSecrets, SecretsError, sealSecrets } from '../../src/predictions/secrets.js';

const key = randomBytes(32);
const secretFields = ['replicate_api_key'];
const input = { prompt: 'a red fox', aspect_ratio: '1:1', replicate_api_key: 'r8_abcdef0123456789' };

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'gantry-secrets-'));
}

/** Flips one bit of the base64url part at `index` of a `v1.<iv>.<tag>.<ciphertext>` blob. */
function tamper(sealed: string, index: number): string {
  const parts = sealed.split('.');
  const bytes = Buffer.from(parts[index] ?? '', 'base64url');
  bytes[0] = (bytes[0] ?? 0) ^ 1;
  parts[index] = bytes.toString('base64url');
  return parts.join('.');
}

describe('sealSecrets / openSecrets', () => {
  it('takes the secrets out of input and puts them back', () => {
    const { input: stored, sealed } = sealSecrets(input, secretFields, key);
    expect(stored).toEqual({ prompt: 'a red fox', aspect_ratio: '1:1' });
    expect(sealed).toMatch(/^v1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    expect(sealed).not.toContain('r8_abcdef');
    expect(openSecrets(stored, sealed, key)).toEqual(input);
  });

  it('does not modify the input it is given', () => {
    const copy = { ...input };
    sealSecrets(copy, secretFields, key);
    expect(copy).toEqual(input);
  });

  it('uses a fresh IV every time', () => {
    const a = sealSecrets(input, secretFields, key).sealed;
    const b = sealSecrets(input, secretFields, key).sealed;
    expect(a).not.toBe(b);
    expect(a?.split('.')[1]).not.toBe(b?.split('.')[1]);
    expect(Buffer.from(a?.split('.')[1] ?? '', 'base64url')).toHaveLength(12);
  });

  it('seals nothing when no secret is present or it is null', () => {
    expect(sealSecrets({ prompt: 'x' }, secretFields, key)).toEqual({ input: { prompt: 'x' }, sealed: null });
    expect(sealSecrets({ prompt: 'x', replicate_api_key: null }, secretFields, key)).toEqual({
      input: { prompt: 'x', replicate_api_key: null },
      sealed: null,
    });
    expect(openSecrets({ prompt: 'x' }, null, key)).toEqual({ prompt: 'x' });
  });

  it('seals several secrets of any JSON type together', () => {
    const many = { prompt: 'x', openai_api_key: 'sk-1', token: { id: 'a', secret: 'b' } };
    const { input: stored, sealed } = sealSecrets(many, ['openai_api_key', 'token'], key);
    expect(stored).toEqual({ prompt: 'x' });
    expect(openSecrets(stored, sealed, key)).toEqual(many);
  });

  it('refuses a blob opened with another key', () => {
    const { input: stored, sealed } = sealSecrets(input, secretFields, key);
    expect(() => openSecrets(stored, sealed, randomBytes(32))).toThrow(SecretsError);
    expect(() => openSecrets(stored, sealed, randomBytes(32))).toThrow(/not the one they were sealed with/);
  });

  it.each([
    ['IV', 1],
    ['tag', 2],
    ['ciphertext', 3],
  ])('detects a tampered %s', (_part, index) => {
    const { input: stored, sealed } = sealSecrets(input, secretFields, key);
    expect(() => openSecrets(stored, tamper(sealed ?? '', index), key)).toThrow(/or the data was altered/);
  });

  it.each([
    ['another version', (s: string) => s.replace(/^v1\./, 'v2.')],
    ['a missing part', (s: string) => s.split('.').slice(0, 3).join('.')],
    [
      'a truncated tag',
      (s: string) =>
        s
          .split('.')
          .map((p, i) => (i === 2 ? p.slice(0, 8) : p))
          .join('.'),
    ],
  ])('rejects a blob with %s', (_case, mangle) => {
    const { input: stored, sealed } = sealSecrets(input, secretFields, key);
    expect(() => openSecrets(stored, mangle(sealed ?? ''), key)).toThrow(SecretsError);
  });

  it('refuses a key that is not 32 bytes', () => {
    expect(() => sealSecrets(input, secretFields, randomBytes(16))).toThrow(/must be 32 bytes/);
  });
});

describe('loadSecretKey', () => {
  it('reads GANTRY_SECRET_KEY as hex or base64, without touching the data dir', () => {
    const dir = tempDir();
    const raw = randomBytes(32);
    expect(loadSecretKey(raw.toString('hex'), dir).equals(raw)).toBe(true);
    expect(loadSecretKey(raw.toString('base64'), dir).equals(raw)).toBe(true);
    expect(loadSecretKey(` ${raw.toString('base64url')}\n`, dir).equals(raw)).toBe(true);
    expect(existsSync(join(dir, 'secret.key'))).toBe(false);
  });

  it.each([
    ['too short', randomBytes(16).toString('hex')],
    ['too long', randomBytes(48).toString('base64')],
    ['not an encoding', 'correct horse battery staple'],
  ])('rejects a GANTRY_SECRET_KEY that is %s', (_case, value) => {
    expect(() => loadSecretKey(value, tempDir())).toThrow(/GANTRY_SECRET_KEY must be a 32-byte key/);
  });

  it('generates secret.key once, mode 0600, and reads it back afterwards', () => {
    const dir = join(tempDir(), 'nested', 'data');
    const first = loadSecretKey(undefined, dir);
    const path = join(dir, 'secret.key');
    expect(first).toHaveLength(32);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(Buffer.from(readFileSync(path, 'utf8').trim(), 'base64').equals(first)).toBe(true);

    const again = loadSecretKey(undefined, dir);
    const empty = loadSecretKey('', dir);
    expect(again.equals(first)).toBe(true);
    expect(empty.equals(first)).toBe(true);
    expect(readdirSync(dir)).toEqual(['secret.key']);
  });

  it('opens with the stored key what it sealed before a restart', () => {
    const dir = tempDir();
    const { input: stored, sealed } = sealSecrets(input, secretFields, loadSecretKey(undefined, dir));
    expect(openSecrets(stored, sealed, loadSecretKey(undefined, dir))).toEqual(input);
  });

  it('reports a corrupt key file instead of replacing it', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'secret.key'), 'garbage\n');
    expect(() => loadSecretKey(undefined, dir)).toThrow(/secret\.key must be a 32-byte key/);
    expect(readFileSync(join(dir, 'secret.key'), 'utf8')).toBe('garbage\n');
  });
});
