/**
 * The console (README, "Console"): GET /console and its client routes answer the single page, GET
 * /console/assets/<hashed name> its script and stylesheet. Assets are precompressed at build time and
 * cached for good (their names change with their content); the page itself is revalidated every time.
 * Every answer carries a CSP without inline script, and refuses to be framed.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import { type Asset, type ConsoleFiles, defaultConsoleDir, loadConsoleFiles, negotiate } from './assets.js';

/**
 * Scripts and styles from Gantry only; images and media may also come from https: because outputs stored
 * in an S3 bucket are served from the bucket's own pre-signed links.
 */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' https: data: blob:",
  "media-src 'self' https: blob:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': CONSOLE_CSP,
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
  'cross-origin-opener-policy': 'same-origin',
};

const HTML = { 'text/html': { schema: { type: 'string' } } };
const NOT_MODIFIED = { description: 'Not modified (If-None-Match)', type: 'null' };

const PAGE_SCHEMA = {
  summary: 'The console (HTML)',
  description:
    "The web console's single page: sign in with an API key or an admin key (POST /admin/v1/session). " +
    '`no-cache` with an ETag; Content-Encoding br or gzip as Accept-Encoding allows. 404 when disabled.',
  tags: ['console'],
  response: { 200: { description: 'The page', content: HTML }, 304: NOT_MODIFIED },
};

const FILE_SCHEMA = {
  summary: "The console's assets and client routes",
  description:
    '`assets/<name>`: a content-hashed script or stylesheet, cached for a year as immutable; any other path ' +
    "is a page of the console and answers the console's HTML.",
  tags: ['console'],
  params: {
    type: 'object',
    required: ['path'],
    properties: { path: { type: 'string', description: 'assets/<hashed name>, or a page such as keys' } },
  },
  response: {
    200: {
      description: 'The asset, or the page',
      content: {
        ...HTML,
        'text/javascript': { schema: { type: 'string' } },
        'text/css': { schema: { type: 'string' } },
      },
    },
    304: NOT_MODIFIED,
  },
};

export interface ConsoleRouteOptions {
  /** The built console; default dist/console of this checkout. */
  dir?: string;
}

export function registerConsoleRoutes(
  app: FastifyInstance,
  gantry: Gantry,
  options: ConsoleRouteOptions = {},
): void {
  const dir = options.dir ?? defaultConsoleDir();
  // Read at the first request: a build made after start-up (npm run build in another shell) is picked up.
  let files: ConsoleFiles | undefined;
  const built = (): ConsoleFiles => {
    files ??= loadConsoleFiles(dir);
    if (!files) {
      throw new GantryError('SERVICE_UNAVAILABLE', {
        message: 'The console is not built: run `npm run build`',
      });
    }
    return files;
  };
  const enabled = () => {
    if (!gantry.config.web.console.enabled) throw new GantryError('NOT_FOUND');
  };

  const page = async (request: FastifyRequest, reply: FastifyReply) => {
    enabled();
    return send(request, reply, built().index, 'no-cache');
  };
  app.get('/console', { schema: PAGE_SCHEMA }, page);
  app.get('/console/*', { schema: FILE_SCHEMA }, async (request, reply) => {
    enabled();
    const rest = (request.params as { '*': string })['*'];
    if (rest.startsWith('assets/')) {
      const asset = built().assets.get(rest.slice('assets/'.length));
      if (!asset) throw new GantryError('NOT_FOUND');
      return send(request, reply, asset, 'public, max-age=31536000, immutable');
    }
    // Any other path is a client route of the single page (a bookmark, a reload).
    return send(request, reply, built().index, 'no-cache');
  });
}

function send(request: FastifyRequest, reply: FastifyReply, asset: Asset, cacheControl: string) {
  reply.headers(SECURITY_HEADERS);
  reply.header('cache-control', cacheControl);
  reply.header('etag', asset.etag);
  reply.header('vary', 'accept-encoding');
  const ifNoneMatch = request.headers['if-none-match'];
  if (ifNoneMatch?.split(',').some((tag) => tag.trim() === asset.etag)) {
    return reply.code(304).send();
  }
  const encoding = negotiate(request.headers['accept-encoding'], asset);
  reply.header('content-type', asset.type);
  if (encoding !== 'identity') reply.header('content-encoding', encoding);
  return reply.send(asset.bodies[encoding] ?? asset.bodies.identity);
}
