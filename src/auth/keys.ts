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
