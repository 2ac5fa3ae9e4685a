/**
 * Gantry's node flags (a larger young generation: fewer, cheaper scavenges under load) are given in three
 * launchers, which must agree: `npm start`, the `gantry` command's shebang and the Docker image. The bench
 * reads them from `npm start`.
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

  it('the gantry command and the Docker image use the same flags as npm start', () => {
    const shebang = read('bin/gantry.js').split('\n')[0] as string;
    expect(shebang).toBe(`#!/usr/bin/env -S node ${startFlags().join(' ')}`);
    const cmd = /^CMD (\[.*\])$/m.exec(read('Dockerfile'))?.[1];
    expect(JSON.parse(cmd as string)).toEqual(['node', ...startFlags(), 'bin/gantry.js', 'serve']);
  });

  it('the gantry command runs through its shebang, and node takes the flags', async () => {
    const run = promisify(execFile);
    const { stdout } = await run(new URL('bin/gantry.js', root).pathname, ['--help']);
    expect(stdout).toContain('gantry');
    // The shebang's interpreter line as the kernel hands it to env: node sees the flags, not one word.
    const interpreter = (read('bin/gantry.js').split('\n')[0] as string).slice(2).split(' ');
    const { stdout: argv } = await run(interpreter[0] as string, [
      ...interpreter.slice(1, 2),
      `${interpreter.slice(2).join(' ')} -p process.execArgv.slice(0,${startFlags().length}).join(" ")`,
    ]);
    expect(argv.trim()).toBe(startFlags().join(' '));
  });
});
