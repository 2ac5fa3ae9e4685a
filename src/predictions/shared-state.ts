/**
 * Instances that share a Redis must share GANTRY_SECRET_KEY and the output store (README, "The gantry
 * command"): otherwise they start fine and then fail one request at a time (file links that 404, webhook
 * signatures the account's secret does not verify, sealed inputs a worker cannot open). checkSharedState
 * finds out at start instead, and names what to share.
 *
 * - The secret: the first instance keeps a fingerprint of it in Redis (an HMAC of a fixed label under a
 *   key derived from the secret: it tells secrets apart and reveals nothing of them); every later
 *   instance compares its own.
 * - The local file store: the first instance writes a marker file with a random id into files_dir and
 *   keeps the id in Redis; an instance that does not find that marker in its files_dir does not share the
 *   folder. An S3 bucket is shared by configuration: not checked.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Redis } from 'ioredis';

export const SECRET_KEY = 'gantry:{deployment}:secret-fingerprint';
export const FILES_KEY = 'gantry:{deployment}:files-dir';
export const MARKER_FILE = '.gantry-files-id';

/** Stable per secret, and no way back to it: HMAC(HMAC(secret, label), label). */
export function secretFingerprint(secret: Buffer): string {
  const derived = createHmac('sha256', secret).update('gantry-secret-fingerprint-key').digest();
  return createHmac('sha256', derived).update('gantry-secret-fingerprint').digest('hex');
}

/** The id in files_dir's marker file, written (with a new id) when there is none yet. */
export function markerId(filesDir: string): string {
  const path = join(filesDir, MARKER_FILE);
  mkdirSync(filesDir, { recursive: true });
  // Written whole under a private name, then linked into place: link() fails if the marker exists, so
  // of two instances creating it at once on a shared folder one wins, and neither can read it half written.
  const draft = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
  writeFileSync(draft, `${randomBytes(16).toString('hex')}\n`);
  try {
    linkSync(draft, path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    rmSync(draft, { force: true });
  }
  return readFileSync(path, 'utf8').trim();
}

/** The value under `key`, set to `mine` first if there is none. */
async function claim(redis: Redis, key: string, mine: string): Promise<string> {
  await redis.set(key, mine, 'NX');
  return (await redis.get(key)) ?? mine;
}

/**
 * Undefined when this instance shares the secret and the file store with the others on this Redis (or is
 * the first), else the one line to print before refusing to start.
 */
export async function checkSharedState(
  redis: Redis,
  options: { secret: Buffer; filesDir: string | undefined },
): Promise<string | undefined> {
  const fingerprint = secretFingerprint(options.secret);
  if ((await claim(redis, SECRET_KEY, fingerprint)) !== fingerprint) {
    return (
      'GANTRY_SECRET_KEY is not the one the other instances on this Redis use: give every api and worker ' +
      'instance the same GANTRY_SECRET_KEY'
    );
  }
  if (options.filesDir === undefined) return undefined;
  const id = markerId(options.filesDir);
  if ((await claim(redis, FILES_KEY, id)) !== id) {
    return (
      `predictions.files_dir (${options.filesDir}) is not the folder the other instances on this Redis ` +
      'use: mount one shared volume as files_dir on every api and worker instance, or use an S3 bucket'
    );
  }
  return undefined;
}
