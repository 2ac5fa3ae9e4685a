/**
 * Keeps secret inputs (a caller's `<partner>_api_key`, spec 2.2) out of the queue and the database in
 * the clear. While a prediction waits or is stored, its secret fields are taken out of `input` and kept
 * as one sealed blob; the worker opens it just before calling the backend.
 *
 * Blob format: `v1.<iv>.<tag>.<ciphertext>`, each part base64url. AES-256-GCM with a random 12-byte IV;
 * the ciphertext is the JSON of `{field: value}`. The version prefix is also bound in as additional
 * authenticated data, so a blob cannot be replayed under another format version.
 */

import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { JsonObject } from '../../providers/predictions/types.js';

const FORMAT_VERSION = 'v1';
const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_FILE = 'secret.key';

/** A sealed blob could not be opened, or a key is unusable. The message never holds a secret. */
export class SecretsError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'SecretsError';
  }
}

export interface SealedInput {
  /** `input` without its secret fields. */
  input: JsonObject;
  /** The secret fields, encrypted; null when the input held none. */
  sealed: string | null;
}

/** Takes the present, non-null secret fields out of `input` and encrypts them. Does not mutate `input`. */
export function sealSecrets(input: JsonObject, secretFields: readonly string[], key: Buffer): SealedInput {
  checkKey(key);
  const rest: JsonObject = { ...input };
  const secrets: JsonObject = {};
  for (const field of secretFields) {
    const value = rest[field];
    if (value === undefined || value === null) continue;
    secrets[field] = value;
    delete rest[field];
  }
  if (Object.keys(secrets).length === 0) return { input: rest, sealed: null };

  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(FORMAT_VERSION));
  const ciphertext = Buffer.concat([cipher.update(JSON.stringify(secrets), 'utf8'), cipher.final()]);
  const parts = [iv, cipher.getAuthTag(), ciphertext].map((part) => part.toString('base64url'));
  return { input: rest, sealed: [FORMAT_VERSION, ...parts].join('.') };
}

/** `input` with the sealed secret fields put back. Throws SecretsError on a wrong key or altered blob. */
export function openSecrets(input: JsonObject, sealed: string | null, key: Buffer): JsonObject {
  if (sealed === null) return { ...input };
  checkKey(key);
  const parts = sealed.split('.');
  if (parts.length !== 4 || parts[0] !== FORMAT_VERSION) {
    throw new SecretsError(`sealed secrets are not in the ${FORMAT_VERSION} format`);
  }
  const [iv, tag, ciphertext] = parts.slice(1).map((part) => Buffer.from(part, 'base64url')) as [
    Buffer,
    Buffer,
    Buffer,
  ];
  if (iv.length !== IV_BYTES || tag.length !== TAG_BYTES) {
    throw new SecretsError('sealed secrets are malformed (bad IV or tag length)');
  }
  let plaintext: string;
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
    decipher.setAAD(Buffer.from(FORMAT_VERSION));
    decipher.setAuthTag(tag);
    plaintext = Buffer.concat([decipher.update(ciphertext), decipher.final()]).toString('utf8');
  } catch (err) {
    throw new SecretsError(
      'sealed secrets could not be opened: the secret key is not the one they were sealed with, or the data was altered',
      { cause: err },
    );
  }
  const secrets: unknown = JSON.parse(plaintext);
  if (typeof secrets !== 'object' || secrets === null || Array.isArray(secrets)) {
    throw new SecretsError('sealed secrets do not hold an object');
  }
  return { ...input, ...(secrets as JsonObject) };
}

/**
 * The key that seals secrets. From GANTRY_SECRET_KEY (`value`: 32 bytes as 64 hex characters or as
 * base64/base64url) when set; else from `<dataDir>/secret.key`, generated on first start with mode 0600.
 * A generated key only suits a single host: several Gantry processes sharing a queue must share the
 * key through GANTRY_SECRET_KEY. In production the key comes from a secret manager or the service's
 * environment, never from a file beside the data it opens (README, "Shutdown, backups and the secret").
 */
export function loadSecretKey(value: string | undefined, dataDir: string): Buffer {
  if (value !== undefined && value.trim() !== '') return parseKey(value.trim(), 'GANTRY_SECRET_KEY');
  const path = join(dataDir, KEY_FILE);
  const existing = readKeyFile(path);
  if (existing) return existing;

  mkdirSync(dataDir, { recursive: true });
  const key = randomBytes(KEY_BYTES);
  // Written whole to a private temporary file, then linked into place: link fails if another process
  // got there first, so two processes starting together never read a half-written or different key.
  const temporary = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(temporary, `${key.toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
  try {
    linkSync(temporary, path);
    return key;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    const winner = readKeyFile(path);
    if (!winner) throw new SecretsError(`${path} disappeared while it was being created`);
    return winner;
  } finally {
    unlinkSync(temporary);
  }
}

function readKeyFile(path: string): Buffer | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  return parseKey(text.trim(), path);
}

function parseKey(text: string, source: string): Buffer {
  const key = /^[0-9a-fA-F]{64}$/.test(text)
    ? Buffer.from(text, 'hex')
    : /^[A-Za-z0-9+/_-]+={0,2}$/.test(text)
      ? Buffer.from(text, 'base64')
      : undefined;
  if (key?.length !== KEY_BYTES) {
    throw new SecretsError(`${source} must be a ${KEY_BYTES}-byte key, as 64 hex characters or base64`);
  }
  return key;
}

function checkKey(key: Buffer): void {
  if (key.length !== KEY_BYTES) throw new SecretsError(`the secret key must be ${KEY_BYTES} bytes`);
}
