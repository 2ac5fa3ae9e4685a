/**
 * scripts/build.mjs: `npm start` builds dist/ only when the sources changed since the last build. The real
 * script runs on a tiny project in a temp folder. Most cases give that project a stand-in `tsc` (it
 * records each run, copies src/main.ts to dist/ and fails on TYPE_ERROR), because a real tsc run costs
 * seconds; the last case uses the real TypeScript from the repo.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { removeTempDirs, tempDir } from './helpers/temp-dirs.js';

const ROOT = new URL('..', import.meta.url).pathname;
const SCRIPT = join(ROOT, 'scripts/build.mjs');
const STAND_IN_TSC = `import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
appendFileSync('tsc-runs', process.argv.slice(2).join(' ') + '\\n');
const main = readFileSync('src/main.ts', 'utf8');
if (main.includes('TYPE_ERROR')) { process.stderr.write('src/main.ts(1,1): error TS2322\\n'); process.exit(2); }
mkdirSync('dist/src', { recursive: true });
writeFileSync('dist/src/main.js', main);
`;
let dir: string;

function write(file: string, text: string): void {
  mkdirSync(join(dir, file, '..'), { recursive: true });
  writeFileSync(join(dir, file), text);
}

function project(): void {
  dir = tempDir('gantry-build-');
  write('package.json', '{ "type": "module" }\n');
  write(
    'tsconfig.json',
    JSON.stringify({ compilerOptions: { module: 'NodeNext', strict: true, outDir: 'dist', rootDir: '.' } }),
  );
  write('tsconfig.build.json', JSON.stringify({ extends: './tsconfig.json', include: ['src', 'providers'] }));
  write('src/main.ts', "export const version = 'v1';\n");
  write('providers/extra.ts', 'export const extra = 1;\n');
}

/** Runs the script; `ran` is how many times tsc ran during this call. */
function build(...args: string[]) {
  const runs = () => (existsSync(join(dir, 'tsc-runs')) ? readFileSync(join(dir, 'tsc-runs'), 'utf8') : '');
  const before = runs().split('\n').length;
  const res = spawnSync(process.execPath, [SCRIPT, ...args], { cwd: dir, encoding: 'utf8' });
  return { code: res.status, out: res.stdout + res.stderr, ran: runs().split('\n').length - before };
}

afterAll(removeTempDirs);

const built = () => readFileSync(join(dir, 'dist/src/main.js'), 'utf8');

describe('scripts/build.mjs with a stand-in tsc', () => {
  beforeEach(() => {
    project();
    write('node_modules/typescript/package.json', '{ "name": "typescript", "version": "5.0.0" }\n');
    write('node_modules/typescript/bin/tsc', STAND_IN_TSC);
  });

  it('builds when dist/ is missing, then skips until a source changes', () => {
    expect(build('--if-changed')).toMatchObject({ code: 0, ran: 1 });
    expect(readFileSync(join(dir, 'tsc-runs'), 'utf8')).toBe('-p tsconfig.build.json\n');
    const skipped = build('--if-changed');
    expect(skipped).toMatchObject({ code: 0, ran: 0 });
    expect(skipped.out).toContain('build skipped');

    write('src/main.ts', "export const version = 'v2';\n");
    expect(build('--if-changed')).toMatchObject({ code: 0, ran: 1 });
    expect(built()).toContain('v2');
    expect(build('--if-changed')).toMatchObject({ code: 0, ran: 0 });
  });

  it('builds again after a file is deleted or added, a tsconfig or TypeScript changes, dist/ is removed', () => {
    expect(build('--if-changed').ran).toBe(1);
    unlinkSync(join(dir, 'providers/extra.ts'));
    expect(build('--if-changed').ran).toBe(1);
    expect(build('--if-changed').ran).toBe(0);
    write('providers/more/new.ts', 'export const more = 1;\n');
    expect(build('--if-changed').ran).toBe(1);
    write('tsconfig.build.json', JSON.stringify({ extends: './tsconfig.json', include: ['src'] }));
    expect(build('--if-changed').ran).toBe(1);
    write('node_modules/typescript/package.json', '{ "name": "typescript", "version": "5.0.1" }\n');
    expect(build('--if-changed').ran).toBe(1);
    rmSync(join(dir, 'dist'), { recursive: true });
    expect(build('--if-changed')).toMatchObject({ code: 0, ran: 1 });
    expect(built()).toContain('v1');
    expect(build('--if-changed').ran).toBe(0);
  });

  it('fails on a compile error and records nothing, so the next start tries again', () => {
    expect(build('--if-changed').code).toBe(0);
    write('src/main.ts', 'TYPE_ERROR\n');
    const failed = build('--if-changed');
    expect(failed.code).not.toBe(0);
    expect(failed.out).toContain('build failed');
    expect(build('--if-changed')).toMatchObject({ ran: 1 });
    write('src/main.ts', "export const version = 'v3';\n");
    expect(build('--if-changed')).toMatchObject({ code: 0, ran: 1 });
    expect(build('--if-changed').ran).toBe(0);
  });

  it('always builds without --if-changed (npm run build), and records it for the next start', () => {
    expect(build().ran).toBe(1);
    expect(build()).toMatchObject({ code: 0, ran: 1 });
    expect(build('--if-changed').ran).toBe(0);
  });
});

describe('scripts/build.mjs with the real tsc', () => {
  it('compiles, then skips the next start', { timeout: 120_000 }, () => {
    project();
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
    const first = spawnSync(process.execPath, [SCRIPT, '--if-changed'], { cwd: dir, encoding: 'utf8' });
    expect(first.status, first.stdout + first.stderr).toBe(0);
    expect(built()).toContain("export const version = 'v1';");
    expect(existsSync(join(dir, 'dist/providers/extra.js'))).toBe(true);
    const second = spawnSync(process.execPath, [SCRIPT, '--if-changed'], { cwd: dir, encoding: 'utf8' });
    expect(second.status).toBe(0);
    expect(second.stdout).toContain('build skipped');
  });
});
