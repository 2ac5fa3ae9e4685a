/**
 * Gantry's node flags (a larger young generation: fewer, cheaper scavenges under load) are given by the
 * two launchers that can carry them, which must agree: `npm start` and the Docker image. The bench reads
 * them from `npm start`. The `gantry` command's shebang stays plain (BusyBox's env has no -S).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = new URL('..', import.meta.url);
const read = (path: string) => readFileSync(new URL(path, root), 'utf8');

function startFlags(): string[] {
  const start = (JSON.parse(read('package.json')) as { scripts: { start: string } }).scripts.start;
  const words = start.split(/\s+/);
  expect(words[0]).toBe('node');
  return words.slice(1, words.indexOf('bin/gantry.js'));
}

describe('launch flags', () => {
  it('npm start gives node a larger young generation', () => {
    expect(startFlags()).toContain('--max-semi-space-size=64');
  });

  it('the Docker image uses the same flags as npm start', () => {
    const cmd = /^CMD (\[.*\])$/m.exec(read('Dockerfile'))?.[1];
    expect(JSON.parse(cmd as string)).toEqual(['node', ...startFlags(), 'bin/gantry.js', 'serve']);
  });

  it('the gantry command keeps a plain node shebang (env -S is not everywhere) and runs', async () => {
    expect(read('bin/gantry.js').split('\n')[0]).toBe('#!/usr/bin/env node');
    const { stdout } = await promisify(execFile)(new URL('bin/gantry.js', root).pathname, ['--help']);
    expect(stdout).toContain('gantry');
  });
});
