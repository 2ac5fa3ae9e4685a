// Builds dist/ with tsc (`npm run build`); with --if-changed (`npm start`) only when the sources differ
// from those of the last build, so a start without changes skips tsc's 8-11 s.
// The last build is recorded in dist/.build-stamp: a sha256 over the path and content of every file under
// src/ and providers/, the two tsconfig files and TypeScript's version. Contents, not mtimes: an edit, a
// deleted or renamed file, a checkout or a file restored with an old mtime all change it, and a missing
// dist/ or stamp always builds. The stamp is the hash taken before tsc ran, written only if tsc succeeded.
// The console (console/, README "Console") is bundled by esbuild into dist/console/ in the same run, and
// its sources count in the stamp too.
// Plain JavaScript: it runs before anything is compiled, and the Docker image builds with it.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { brotliCompressSync, gzipSync, constants as zlib } from 'node:zlib';

const root = process.cwd();
const SOURCE_DIRS = ['src', 'providers', 'console'];
const CONFIG_FILES = ['tsconfig.json', 'tsconfig.build.json'];
const STAMP = path.join(root, 'dist', '.build-stamp');
const ENTRY = path.join(root, 'dist', 'src', 'main.js');
const CONSOLE_SRC = path.join(root, 'console');
const CONSOLE_OUT = path.join(root, 'dist', 'console');

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
const consoleBuilt = !existsSync(CONSOLE_SRC) || existsSync(path.join(CONSOLE_OUT, 'index.html'));
if (ifChanged && stamp === hash && existsSync(ENTRY) && consoleBuilt) {
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
if (existsSync(CONSOLE_SRC)) await buildConsole();
mkdirSync(path.dirname(STAMP), { recursive: true });
writeFileSync(STAMP, `${hash}\n`);

/**
 * console/src/main.tsx bundled and minified by esbuild (Preact's JSX) into dist/console/assets/ with
 * content-hashed names, index.html pointing at them, and each file beside its .br and .gz, so Gantry
 * serves them precompressed and hashed assets can be cached for good.
 */
async function buildConsole() {
  const esbuild = await import(createRequire(path.join(root, 'package.json')).resolve('esbuild'));
  rmSync(CONSOLE_OUT, { recursive: true, force: true });
  const assets = path.join(CONSOLE_OUT, 'assets');
  const result = await esbuild.build({
    absWorkingDir: root,
    entryPoints: [path.join(CONSOLE_SRC, 'src', 'main.tsx')],
    bundle: true,
    minify: true,
    format: 'esm',
    target: 'es2022',
    jsx: 'automatic',
    jsxImportSource: 'preact',
    entryNames: '[name]-[hash]',
    assetNames: '[name]-[hash]',
    outdir: assets,
    metafile: true,
    legalComments: 'linked',
    logLevel: 'warning',
  });
  const outputs = Object.keys(result.metafile.outputs).map((f) => path.resolve(root, f));
  const url = (file) => `/console/assets/${path.basename(file)}`;
  const script = outputs.find((f) => f.endsWith('.js'));
  const style = outputs.find((f) => f.endsWith('.css'));
  if (!script || !style) throw new Error('console build: esbuild made no script or no stylesheet');
  const html = readFileSync(path.join(CONSOLE_SRC, 'index.html'), 'utf8')
    .replace('%SCRIPT%', url(script))
    .replace('%STYLE%', url(style));
  writeFileSync(path.join(CONSOLE_OUT, 'index.html'), html);
  for (const file of [path.join(CONSOLE_OUT, 'index.html'), ...outputs]) {
    const body = readFileSync(file);
    writeFileSync(
      `${file}.br`,
      brotliCompressSync(body, {
        params: { [zlib.BROTLI_PARAM_QUALITY]: 11, [zlib.BROTLI_PARAM_SIZE_HINT]: body.length },
      }),
    );
    writeFileSync(`${file}.gz`, gzipSync(body, { level: 9 }));
  }
}
