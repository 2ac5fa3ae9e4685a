/**
 * Instances that start at once on one shared files_dir must all read the same marker id (README, "The
 * gantry command": split roles share the file store). Real processes racing on a real folder.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { MARKER_FILE } from '../../src/predictions/shared-state.js';
import { removeTempDirs, tempDir } from '../helpers/temp-dirs.js';

const ROOT = join(import.meta.dirname, '../..');
const TSX = pathToFileURL(join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;
const MODULE = pathToFileURL(join(ROOT, 'src/predictions/shared-state.ts')).href;

/** One process that waits for `startAt` (so all of them race), then prints the marker id it reads. */
function racer(dir: string, startAt: number): Promise<string> {
  const script = `
    const { markerId } = await import(${JSON.stringify(MODULE)});
    while (Date.now() < ${startAt}) {}
    process.stdout.write(JSON.stringify(markerId(${JSON.stringify(dir)})));
  `;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', TSX, '--input-type=module', '-e', script], {
      cwd: ROOT,
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as string) : reject(new Error(err))));
  });
}

afterAll(removeTempDirs);

describe('files_dir marker', () => {
  it('processes creating it at once all read the one complete id', { timeout: 60_000 }, async () => {
    for (let round = 0; round < 3; round++) {
      const dir = tempDir('gantry-marker-');
      const startAt = Date.now() + 2_500;
      const ids = await Promise.all(Array.from({ length: 8 }, () => racer(dir, startAt)));
      const onDisk = readFileSync(join(dir, MARKER_FILE), 'utf8').trim();
      expect(onDisk).toMatch(/^[0-9a-f]{32}$/);
      expect(ids).toEqual(ids.map(() => onDisk));
    }
  });
});
