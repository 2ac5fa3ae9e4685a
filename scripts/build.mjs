// Builds dist/ with tsc (`npm run build`); with --if-changed (`npm start`) only when the sources differ
// from those of the last build, so a start without changes skips tsc's 8-11 s.
// The last build is recorded in dist/.build-stamp: a sha256 over the path and content of every file under
// src/ and providers/, the two tsconfig files and TypeScript's version. Contents, not mtimes: an edit, a
// deleted or renamed file, a checkout or a file restored with an old mtime all change it, and a missing
// dist/ or stamp always builds. The stamp is the hash taken before tsc ran, written only if tsc succeeded.
// Plain JavaScript: it runs before anything is compiled, and the Docker image builds with it.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const root = process.cwd();
const SOURCE_DIRS = ['src', 'providers'];
const CONFIG_FILES = ['tsconfig.json', 'tsconfig.build.json'];
const STAMP = path.join(root, 'dist', '.build-stamp');
const ENTRY = path.join(root, 'dist', 'src', 'main.js');

/** Files under `dir`, as paths relative to the root with / separators, sorted. */
function filesUnder(dir) {
  const out = [];
  const walk = (rel) => {
    for (const entry of readdirSync(path.join(root, rel), { withFileTypes: true })) {
      const child = `${rel}/${entry.name}`;
      if (entry.isDirectory()) walk(child);
      else if (entry.isFile()) out.push(child);
    }
  };
  if (existsSync(path.join(root, dir))) walk(dir);
  return out.sort();
}

function sourceHash(tscPath) {
  const hash = createHash('sha256');
  const typescript = JSON.parse(readFileSync(path.join(path.dirname(tscPath), '..', 'package.json'), 'utf8'));
  hash.update(`typescript ${typescript.version}\0`);
  const files = [
    ...CONFIG_FILES.filter((f) => existsSync(path.join(root, f))),
    ...SOURCE_DIRS.flatMap(filesUnder),
  ];
  for (const file of files) {
    const content = readFileSync(path.join(root, file));
    hash.update(`${file}\0${content.length}\0`).update(content);
  }
  return hash.digest('hex');
}

const ifChanged = process.argv.includes('--if-changed');
const tsc = createRequire(path.join(root, 'package.json')).resolve('typescript/bin/tsc');
const hash = sourceHash(tsc);
const stamp = existsSync(STAMP) ? readFileSync(STAMP, 'utf8').trim() : '';
if (ifChanged && stamp === hash && existsSync(ENTRY)) {
  process.stdout.write('dist/ is up to date with src/ and providers/: build skipped\n');
  process.exit(0);
}
const result = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], {
  cwd: root,
  stdio: 'inherit',
});
if (result.status !== 0) {
  process.stderr.write('build failed: tsc reported the errors above\n');
  process.exit(result.status ?? 1);
}
mkdirSync(path.dirname(STAMP), { recursive: true });
writeFileSync(STAMP, `${hash}\n`);
