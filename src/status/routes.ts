import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Gantry } from '../context.js';
import { rejectOtherMethods } from '../error-handler.js';
import { statusFeedSchema, statusJsonSchema, statusPageSchema } from '../openapi/schemas/status.js';
import { renderAtom, renderHtml, renderJson } from './render.js';
import { type Snapshot, takeSnapshot } from './snapshot.js';

/** How long one snapshot and its renderings serve every caller (the page is public and unmetered). */
export const STATUS_CACHE_MS = 5_000;

interface Rendered {
  body: string;
  etag: string;
}

type Format = 'html' | 'json' | 'atom';

const CONTENT_TYPE: Record<Format, string> = {
  html: 'text/html; charset=utf-8',
  json: 'application/json; charset=utf-8',
  atom: 'application/atom+xml; charset=utf-8',
};

/**
 * The public status page (README, "Status page"): GET (and HEAD) /status, /status.json and
 * /status/feed.atom, no key. One snapshot of the catalogue and history serves every caller for
 * STATUS_CACHE_MS; each format is rendered once per snapshot, on first ask.
 */
export function registerStatusRoutes(app: FastifyInstance, gantry: Gantry): void {
  const startedAt = Date.now();
  // The feed's links are absolute: the configured public URL, else the address this server listens
  // on (never the request's Host header, which would land in the shared cache).
  const origin = (): string => {
    if (gantry.config.server.publicUrl) return gantry.config.server.publicUrl.replace(/\/+$/, '');
    const address = app.server.address();
    if (address && typeof address === 'object') {
      const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      return `http://${host}:${address.port}`;
    }
    return `http://${gantry.config.server.host}:${gantry.config.server.port}`;
  };

  let current: { at: number; snapshot: Promise<Snapshot>; rendered: Map<Format, Rendered> } | undefined;
  const rendered = async (format: Format): Promise<Rendered> => {
    const now = Date.now();
    if (!current || now - current.at >= STATUS_CACHE_MS) {
      const snapshot = takeSnapshot(gantry, now);
      current = { at: now, snapshot, rendered: new Map() };
      // A failed read is not kept: the next request tries again.
      const mine = current;
      snapshot.catch(() => {
        if (current === mine) current = undefined;
      });
    }
    const entry = current;
    const done = entry.rendered.get(format);
    if (done) return done;
    const snapshot = await entry.snapshot;
    const body =
      format === 'html'
        ? renderHtml(snapshot, { subscribe: gantry.plane.subscriptions.enabled })
        : format === 'json'
          ? renderJson(snapshot)
          : renderAtom(snapshot, origin(), startedAt);
    const made = { body, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"` };
    entry.rendered.set(format, made);
    return made;
  };

  const serve = (format: Format) => async (request: FastifyRequest, reply: FastifyReply) => {
    const { body, etag } = await rendered(format);
    reply
      .header('content-type', CONTENT_TYPE[format])
      .header('cache-control', `public, max-age=${STATUS_CACHE_MS / 1000}`)
      .header('etag', etag);
    if (notModified(request.headers['if-none-match'], etag)) return reply.code(304).send();
    return reply.send(body);
  };

  app.get('/status', { schema: statusPageSchema }, serve('html'));
  app.get('/status.json', { schema: statusJsonSchema }, serve('json'));
  app.get('/status/feed.atom', { schema: statusFeedSchema }, serve('atom'));
  for (const url of ['/status', '/status.json', '/status/feed.atom']) rejectOtherMethods(app, url, ['GET']);
}

/** If-None-Match (RFC 9110 13.1.2): `*`, or a list of tags compared weakly. */
export function notModified(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}
