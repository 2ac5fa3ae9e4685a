import { createHash, randomBytes } from 'node:crypto';

const KEY_PREFIX = 'gty_';

/** A new API key: 32 random bytes, so a fast hash is enough to store it safely. */
export function generateKey(): string {
  return KEY_PREFIX + randomBytes(32).toString('base64url');
}

export function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** What may be shown of a key after creation: enough to tell keys apart, not to use one. */
export function keyPrefix(key: string): string {
  return `${key.slice(0, KEY_PREFIX.length + 6)}…`;
}

/**
 * The shortest key Gantry accepts from outside (GANTRY_BOOTSTRAP_KEY, a config account's key_env). Keys
 * are stored as a plain sha256, which is safe only for keys too long to guess or to find from a leaked
 * hash: 32 random hex characters are 128 bits; the keys Gantry generates have 256.
 */
export const MIN_KEY_LENGTH = 32;
