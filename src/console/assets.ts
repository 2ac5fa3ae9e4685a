/**
 * The console's built files (dist/console, made by scripts/build.mjs): read once into memory with their
 * precompressed .br and .gz twins, and the encoding a request accepts picked among them.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export type Encoding = 'br' | 'gzip' | 'identity';

export interface Asset {
  type: string;
  etag: string;
  bodies: Partial<Record<Encoding, Buffer>> & { identity: Buffer };
}

export interface ConsoleFiles {
  index: Asset;
  /** By file name under /console/assets/. */
  assets: Map<string, Asset>;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
};

/** dist/console from this module: dist/src/console/ once compiled, src/console/ when run from sources. */
export function defaultConsoleDir(): string {
  const up = fileURLToPath(new URL('../..', import.meta.url));
  return basename(up) === 'dist' ? join(up, 'console') : join(up, 'dist', 'console');
}

function load(file: string): Asset {
  const identity = readFileSync(file);
  const bodies: Asset['bodies'] = { identity };
  if (existsSync(`${file}.br`)) bodies.br = readFileSync(`${file}.br`);
  if (existsSync(`${file}.gz`)) bodies.gzip = readFileSync(`${file}.gz`);
  const etag = `"${createHash('sha256').update(identity).digest('base64url').slice(0, 22)}"`;
  return { type: TYPES[extname(file)] ?? 'application/octet-stream', etag, bodies };
}

/** The built console, or undefined when dist/console has not been built. */
export function loadConsoleFiles(dir: string): ConsoleFiles | undefined {
  const indexFile = join(dir, 'index.html');
  if (!existsSync(indexFile)) return undefined;
  const assets = new Map<string, Asset>();
  const assetDir = join(dir, 'assets');
  if (existsSync(assetDir)) {
    for (const name of readdirSync(assetDir)) {
      if (name.endsWith('.br') || name.endsWith('.gz')) continue;
      assets.set(name, load(join(assetDir, name)));
    }
  }
  return { index: load(indexFile), assets };
}

/**
 * The best encoding of those available that Accept-Encoding allows: br, then gzip, then identity (unless
 * refused with q=0, which leaves the identity anyway: a 406 helps nobody for a page).
 */
export function negotiate(acceptEncoding: string | undefined, asset: Asset): Encoding {
  if (!acceptEncoding) return 'identity';
  const q = new Map<string, number>();
  for (const part of acceptEncoding.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    let weight = 1;
    for (const p of params) {
      const [k, v] = p.trim().split('=');
      if (k === 'q' && v !== undefined) weight = Number.parseFloat(v) || 0;
    }
    q.set(name, weight);
  }
  const allowed = (name: string) => (q.get(name) ?? q.get('*') ?? 0) > 0;
  if (asset.bodies.br && allowed('br')) return 'br';
  if (asset.bodies.gzip && allowed('gzip')) return 'gzip';
  return 'identity';
}
