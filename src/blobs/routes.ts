/**
 * GET/HEAD /v1/files/<predictionId>/<name>?expires=…&signature=…: serves locally stored output files.
 *
 * The signature is the credential, so these routes need no API key (the app exempts FILES_PATH from
 * authentication): links from `metadata.storage.files` and `output` work in browsers, <video> players
 * and download tools. Single byte ranges are supported because video players seek with them.
 * Errors use the REST envelope; they never carry a file path or a stack trace.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GantryError, restEnvelope } from '../errors.js';
import { fileSchema } from '../openapi/schemas/files.js';
import { type BlobSecret, FILES_PATH, verifyBlobSignature } from './signed-url.js';
import { type BlobReader, isValidBlobKey, type OpenedBlob } from './types.js';

export interface BlobRouteOptions {
  /** Where the files are read from: the LocalDiskBlobStore that signed the links. */
  store: BlobReader;
  /** The secret the store signs links with. */
  secret: BlobSecret;
  /** Epoch milliseconds; tests pin it. */
  now?: () => number;
}

/** The REST envelope (spec 7.1 shape 1), sent directly: the app's envelopeFor() would pick the inference one. */
function sendError(request: FastifyRequest, reply: FastifyReply, err: GantryError): FastifyReply {
  request.errorId = err.errorId;
  return reply.code(err.status).header('cache-control', 'no-store').send(restEnvelope(err));
}

const FRESH_LINK = 'Fetch the prediction again for fresh file URLs.';

export function registerBlobRoutes(app: FastifyInstance, options: BlobRouteOptions): void {
  const { store, secret } = options;
  const now = options.now ?? Date.now;

  app.route({
    method: ['GET', 'HEAD'],
    url: `${FILES_PATH}/*`,
    schema: fileSchema,
    handler: async (request, reply) => {
      // find-my-way has already percent-decoded the wildcard, so `%2e%2e` arrives as `..` and is refused.
      const key = (request.params as { '*'?: string })['*'] ?? '';
      if (!isValidBlobKey(key)) {
        const err = new GantryError('INVALID_REQUEST', {
          message: 'Invalid file path',
          details: 'File URLs look like /v1/files/<predictionId>/<name>; use them as the API returned them.',
        });
        return sendError(request, reply, err);
      }

      const query = request.query as Record<string, unknown>;
      const check = verifyBlobSignature(
        key,
        single(query.expires),
        single(query.signature),
        secret,
        Math.floor(now() / 1000),
      );
      if (!check.valid) {
        // An authentic link that outlived its file (links expire as the retention window ends, when the
        // purge removes the file) is told the truth: the file is gone, a fresh link would not help.
        if (check.reason === 'expired' && (await store.open(key).then(closeIfOpen, () => true)) === false) {
          const details = 'Outputs are deleted when the retention window ends, or with the prediction.';
          return sendError(request, reply, new GantryError('FILE_NOT_FOUND', { details }));
        }
        // One id for both (the catalogue's choice); the message tells a forged link from an old one.
        const message =
          check.reason === 'expired' ? 'The file link has expired' : 'The file link is not valid';
        return sendError(
          request,
          reply,
          new GantryError('FILE_LINK_EXPIRED', { message, details: FRESH_LINK }),
        );
      }

      let blob: OpenedBlob | null;
      try {
        blob = await store.open(key);
      } catch (err) {
        request.log.error({ err }, 'file could not be opened');
        return sendError(request, reply, new GantryError('INTERNAL_ERROR'));
      }
      if (blob === null) {
        const details = 'Outputs are deleted when the retention window ends, or with the prediction.';
        return sendError(request, reply, new GantryError('FILE_NOT_FOUND', { details }));
      }

      const maxAge = Math.max(0, check.expiresAt - Math.floor(now() / 1000));
      return sendBlob(request, reply, blob, maxAge);
    },
  });
}

/** Sends a verified, opened blob: whole, one range, 304 or 416. Always releases the blob. */
async function sendBlob(
  request: FastifyRequest,
  reply: FastifyReply,
  blob: OpenedBlob,
  maxAgeSeconds: number,
): Promise<FastifyReply> {
  reply.headers({
    etag: blob.etag,
    'last-modified': new Date(blob.modifiedAt).toUTCString(),
    // private: the URL is a credential; shared caches must not hand the file to others after expiry.
    'cache-control': `private, max-age=${maxAgeSeconds}`,
    'accept-ranges': 'bytes',
    // The type comes from the model; do not let browsers guess another one, or run it as a page.
    'x-content-type-options': 'nosniff',
    'content-security-policy': 'sandbox',
    // The link alone grants access (no cookies, no key), so any web page holding it may read the file.
    'access-control-allow-origin': '*',
  });

  if (matchesAny(request.headers['if-none-match'], blob.etag)) {
    await blob.close();
    return reply.code(304).send();
  }

  const range = wantedRange(request, blob);
  if (range === 'unsatisfiable') {
    await blob.close();
    reply.header('content-range', `bytes */${blob.size}`);
    return sendError(
      request,
      reply,
      new GantryError('RANGE_NOT_SATISFIABLE', { details: `The file is ${blob.size} bytes long.` }),
    );
  }

  reply.header('content-type', blob.contentType);
  if (range !== null) {
    reply.code(206);
    reply.header('content-range', `bytes ${range.start}-${range.end}/${blob.size}`);
    reply.header('content-length', String(range.end - range.start + 1));
  } else {
    reply.header('content-length', String(blob.size));
  }

  // No body for HEAD, and none to stream for an empty file.
  if (request.method === 'HEAD' || blob.size === 0) {
    await blob.close();
    return reply.send(request.method === 'HEAD' ? undefined : Buffer.alloc(0));
  }
  return reply.send(blob.stream(range ?? undefined));
}

/** The single range to send, null for the whole file, or 'unsatisfiable' (416). */
function wantedRange(
  request: FastifyRequest,
  blob: OpenedBlob,
): { start: number; end: number } | null | 'unsatisfiable' {
  const header = request.headers.range;
  if (header === undefined) return null;
  // If-Range: resume only the version the client already has part of; otherwise send it all.
  const ifRange = request.headers['if-range'];
  if (ifRange !== undefined && ifRange !== blob.etag) return null;
  return parseByteRange(header, blob.size);
}

/**
 * One `bytes=` range of RFC 9110 section 14.1.2, against a file of `size` bytes. Anything else (other
 * units, several ranges, bad syntax) returns null, so the whole file is sent, as section 14.2 allows.
 */
export function parseByteRange(
  header: string,
  size: number,
): { start: number; end: number } | null | 'unsatisfiable' {
  const match = /^bytes=[ \t]*([0-9]{0,15})[ \t]*-[ \t]*([0-9]{0,15})[ \t]*$/i.exec(header);
  if (match === null) return null;
  const [, first = '', last = ''] = match;
  if (first === '' && last === '') return null;
  if (first === '') {
    // Suffix range: the last N bytes.
    const length = Number(last);
    if (length === 0 || size === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - length), end: size - 1 };
  }
  const start = Number(first);
  const lastPos = last === '' ? Number.POSITIVE_INFINITY : Number(last);
  if (lastPos < start) return null;
  if (start >= size) return 'unsatisfiable';
  return { start, end: Math.min(lastPos, size - 1) };
}

/** If-None-Match: `*` or a list of tags, compared weakly (RFC 9110 section 13.1.2). */
function matchesAny(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}

/** A query value given exactly once; repeated or structured values are not ours and fail the check. */
function single(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

/** True when the blob exists (and releases it), false when it does not. */
async function closeIfOpen(blob: OpenedBlob | null): Promise<boolean> {
  if (blob === null) return false;
  await blob.close();
  return true;
}
