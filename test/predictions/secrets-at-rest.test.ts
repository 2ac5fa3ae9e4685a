/**
 * Sealed partner keys do not outlive their prediction on disk: once the sealed value is removed (the
 * prediction ended, or was deleted), neither gantry.db nor gantry.db-wal holds its bytes any more
 * (secure_delete overwrites the old cell, a checkpoint moves the overwritten page into the file and
 * empties the log). Real files: a SqliteStore on a temp data dir, read back as raw bytes.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import Database from 'libsql';
import { afterAll, afterEach, expect, it } from 'vitest';
import { sealSecrets } from '../../src/predictions/secrets.js';
import { SqlitePredictionStore } from '../../src/predictions/store-sqlite.js';
import type { PredictionRecord } from '../../src/predictions/types.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { predictionRecord } from '../helpers/prediction-record.js';
import { removeTempDirs, tempDir } from '../helpers/temp-dirs.js';
import { until } from '../helpers/wait.js';

const opened: SqliteStore[] = [];
afterEach(() => {
  for (const store of opened.splice(0)) store.close();
});
afterAll(() => removeTempDirs());

function prediction(id: string, sealed: string): PredictionRecord {
  return predictionRecord({
    id,
    model: 'partner/model',
    secretFields: ['replicate_api_key'],
    sealedSecrets: sealed,
  });
}

/** A store on a fresh data dir, a sealed value, and a probe of the raw files for it. */
function setUp() {
  const dir = tempDir('gantry-secrets-at-rest-');
  const store = new SqliteStore(join(dir, 'gantry.db'));
  opened.push(store);
  const predictions = new SqlitePredictionStore(store.handle);
  const { sealed } = sealSecrets(
    { prompt: 'a cat', replicate_api_key: `r8_${randomBytes(24).toString('hex')}` },
    ['replicate_api_key'],
    randomBytes(32),
  );
  if (sealed === null) throw new Error('nothing was sealed');
  // The ciphertext part: unique to this value, and what an attacker holding the key would need.
  const needle = Buffer.from(sealed.split('.')[3] as string);
  const onDisk = (): boolean =>
    ['gantry.db', 'gantry.db-wal'].some((file) => {
      const path = join(dir, file);
      return existsSync(path) && readFileSync(path).includes(needle);
    });
  return { dir, predictions, sealed, onDisk };
}

it('overwrites the sealed value in gantry.db and its log once the prediction ends', async () => {
  const { predictions, sealed, onDisk } = setUp();
  await predictions.create(prediction('p-ends', sealed));
  expect(onDisk()).toBe(true);
  await predictions.update('p-ends', { status: 'succeeded', completedAt: Date.now(), sealedSecrets: null });
  await until('the sealed value to leave the files', () => !onDisk(), 5_000, 50);
});

it('overwrites the sealed value when the prediction is deleted', async () => {
  const { predictions, sealed, onDisk } = setUp();
  await predictions.create(prediction('p-deleted', sealed));
  expect(onDisk()).toBe(true);
  await predictions.delete('p-deleted');
  await until('the sealed value to leave the files', () => !onDisk(), 5_000, 50);
});

it('does not hold the event loop while a reader holds the log, and scrubs once the reader is gone', async () => {
  const { dir, predictions, sealed, onDisk } = setUp();
  await predictions.create(prediction('p-read', sealed));
  // Another connection (a backup, `gantry keys list`) in a read transaction that sees the sealed value.
  const reader = new Database(join(dir, 'gantry.db'));
  reader.exec('BEGIN');
  reader.prepare('SELECT count(*) FROM sqlite_master').get();
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  try {
    await predictions.update('p-read', { status: 'succeeded', completedAt: Date.now(), sealedSecrets: null });
    // A few tries of the checkpoint (after 200, 600 and 1400 ms), each of which finds the reader.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    delay.disable();
    expect(delay.max / 1e6).toBeLessThan(500);
    expect(onDisk()).toBe(true);
  } finally {
    reader.exec('COMMIT');
    reader.close();
  }
  await until('the sealed value to leave the files', () => !onDisk(), 10_000, 50);
});
