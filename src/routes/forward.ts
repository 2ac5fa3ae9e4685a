import type { FastifyInstance, FastifyRequest } from 'fastify';
import { request as undiciRequest } from 'undici';
import type { ForwardTarget } from '../../providers/types.js';
import type { Gantry } from '../app.js';
import { GantryError, invalidParameter } from '../errors.js';
import { clientGoneSignal } from '../inference/client.js';
import { principalOf } from '../inference/resolve.js';

/** Headers that belong to one hop and must not be relayed. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'proxy-authorization',
  'proxy-authenticate',
  'host',
  'content-length',
  'authorization',
  'x-api-key',
]);

const MULTIPART_MODEL = /name="model"\r\n(?:[^\r\n]+\r\n)*\r\n([^\r\n]*)\r\n/;

/**
 * Other OpenAI endpoints under /v1 (audio, images, moderations, ...) are forwarded as they are to the
 * first OpenAI-compatible provider of the model named in the body, after Gantry's own auth.
 */
export async function registerForwardRoutes(app: FastifyInstance, gantry: Gantry): Promise<void> {
  await app.register(async (scope) => {
    // Bodies are relayed byte for byte, so this scope reads them raw whatever their type.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

    scope.post('/v1/*', async (request, reply) => {
      const raw = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      const contentType = String(request.headers['content-type'] ?? '');
      const { name, body } = readModel(raw, contentType);
      const model = gantry.catalog.get(name, principalOf(request).account);
      if (!model)
        throw new GantryError('MODEL_NOT_FOUND', {
          message: `The model ${name} does not exist`,
          param: 'model',
        });
      const route = model.entry.routes.find((r) => gantry.providers.get(r.provider)?.forward !== undefined);
      const target = route && gantry.providers.get(route.provider)?.forward;
      if (!route || !target) {
        throw new GantryError('MODEL_NOT_SUPPORTED', {
          message: `The model ${name} is not served by an OpenAI-compatible provider, so ${pathOf(request)} is not available`,
          param: 'model',
        });
      }
      const outBody = body && route.model !== name ? renameJsonModel(body, route.model) : raw;
      const upstream = await send(target, request, outBody, clientGoneSignal(reply)).catch(
        (cause: unknown) => {
          throw new GantryError('UPSTREAM_ERROR', {
            message: 'The model provider could not be reached',
            cause,
          });
        },
      );
      reply.code(upstream.statusCode);
      for (const [key, value] of Object.entries(upstream.headers)) {
        if (value !== undefined && !HOP_BY_HOP.has(key)) reply.header(key, value);
      }
      return reply.send(upstream.body);
    });
  });
}

function pathOf(request: FastifyRequest): string {
  return request.url.split('?')[0] ?? request.url;
}

function readModel(raw: Buffer, contentType: string): { name: string; body?: Record<string, unknown> } {
  if (contentType.includes('application/json')) {
    let body: unknown;
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch (err) {
      throw new GantryError('INVALID_REQUEST', { message: `Malformed JSON body: ${(err as Error).message}` });
    }
    const name = (body as { model?: unknown } | null)?.model;
    if (typeof name !== 'string' || name === '') throw invalidParameter('model', 'model is required');
    return { name, body: body as Record<string, unknown> };
  }
  if (contentType.includes('multipart/form-data')) {
    const match = MULTIPART_MODEL.exec(raw.toString('latin1'));
    if (match?.[1]) return { name: Buffer.from(match[1], 'latin1').toString('utf8') };
    throw invalidParameter('model', 'model is required');
  }
  throw new GantryError('UNSUPPORTED_MEDIA_TYPE', { details: 'Send JSON or multipart/form-data.' });
}

function renameJsonModel(body: Record<string, unknown>, upstreamModel: string): Buffer {
  return Buffer.from(JSON.stringify({ ...body, model: upstreamModel }));
}

function send(target: ForwardTarget, request: FastifyRequest, body: Buffer, signal: AbortSignal) {
  const headers: Record<string, string> = {};
  for (const [key, value] of Object.entries(request.headers)) {
    if (typeof value === 'string' && !HOP_BY_HOP.has(key)) headers[key] = value;
  }
  Object.assign(headers, target.headers);
  const rest = request.url.slice('/v1'.length);
  return undiciRequest(target.baseUrl + rest, { method: 'POST', headers, body, signal });
}
