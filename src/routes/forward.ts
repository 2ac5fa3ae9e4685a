import type { FastifyInstance, FastifyRequest } from 'fastify';
import { request as undiciRequest } from 'undici';
import type { ForwardTarget } from '../../providers/types.js';
import type { Gantry } from '../context.js';
import { GantryError, invalidParameter } from '../errors.js';
import { clientGoneSignal } from '../inference/client.js';
import { principalOf } from '../inference/resolve.js';
import { trackStream } from '../inference/stream-reply.js';
import { openTicket } from '../inference/ticket.js';
import { checkJsonDepth } from '../json-depth.js';
import { forwardSchema } from '../openapi/schemas/forward.js';
import { activeSafety } from '../safety/engine.js';

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

const BOUNDARY = /boundary=(?:"([^"]+)"|([^;\s]+))/i;

/**
 * Other OpenAI endpoints under /v1 (audio, images, moderations, ...) are forwarded as they are to the
 * first OpenAI-compatible provider of the model named in the body, after Gantry's own auth, for models
 * that declare the `other` api. A body relayed unread cannot be checked or masked, so a request whose
 * safety policy would block or mask is refused (README, "Safety" → "Forwarded endpoints").
 */
export async function registerForwardRoutes(app: FastifyInstance, gantry: Gantry): Promise<void> {
  await app.register(async (scope) => {
    // Bodies are relayed byte for byte (but for the model's name), so this scope reads them raw.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

    scope.post('/v1/*', { schema: forwardSchema }, async (request, reply) => {
      const raw = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      const contentType = String(request.headers['content-type'] ?? '');
      const { name, body, valueAt } = readModel(raw, contentType);
      const principal = principalOf(request);
      const model = gantry.catalog.get(name, principal.account);
      if (!model)
        throw new GantryError('MODEL_NOT_FOUND', {
          message: `The model ${name} does not exist`,
          param: 'model',
        });
      if (!model.entry.apis.includes('other')) {
        throw new GantryError('MODEL_NOT_SUPPORTED', {
          message: `The model ${name} does not serve ${pathOf(request)}`,
          param: 'model',
        });
      }
      // Offline in the config or by an operator's override: refused as on every other inference route.
      const offline = gantry.catalog.offline(model.entry);
      if (offline !== undefined) {
        throw new GantryError('MODEL_NOT_ACTIVE', {
          message: `The model ${name} is offline`,
          param: 'model',
          ...(offline.reason === undefined ? {} : { details: offline.reason }),
        });
      }
      const route = model.entry.routes.find((r) => gantry.providers.get(r.provider)?.forward !== undefined);
      const target = route && gantry.providers.get(route.provider)?.forward;
      if (!route || !target) {
        throw new GantryError('MODEL_NOT_SUPPORTED', {
          message: `The model ${name} is not served by an OpenAI-compatible provider, so ${pathOf(request)} is not available`,
          param: 'model',
        });
      }
      refuseUncheckable(gantry, name, model.entry.namespace, principal, pathOf(request));
      let outBody = raw;
      if (route.model !== name) {
        if (body) outBody = renameJsonModel(body, route.model);
        else if (valueAt) outBody = renameMultipartModel(raw, valueAt, route.model);
      }
      // Forwarded calls count against the model's limits and are metered like the rest (no tokens: the
      // body is relayed unread).
      request.labels.model = model.entry.namespace;
      const ticket = await openTicket(gantry, request, reply, {
        api: 'forward',
        model,
        countInputTokens: () => 0,
        outputTokens: 0,
        stream: false,
      });
      const upstream = await send(target, request, outBody, clientGoneSignal(reply));
      ticket.servedBy(route.provider);
      // An upstream 401/403 is about Gantry's credential, not the client's key: never relay it as is.
      if (upstream.statusCode === 401 || upstream.statusCode === 403) {
        await upstream.body.dump().catch(() => undefined);
        throw new GantryError('UPSTREAM_ERROR', {
          message: `The model provider refused Gantry's credentials (HTTP ${upstream.statusCode})`,
        });
      }
      reply.code(upstream.statusCode);
      for (const [key, value] of Object.entries(upstream.headers)) {
        if (value !== undefined && !HOP_BY_HOP.has(key)) reply.header(key, value);
      }
      // Relayed byte for byte, so at the shutdown deadline nothing can be added to it: the relay stops,
      // the response ends cleanly (cut short) and the upstream call is aborted.
      const res = reply.raw;
      const relayed = upstream.body;
      const untrack = trackStream(() => {
        relayed.unpipe(res);
        res.end(() => relayed.destroy());
      });
      res.once('close', untrack);
      return reply.send(relayed);
    });
  });
}

/**
 * Under a policy that blocks or masks, the body would have to be read, checked and masked first, which
 * a byte-for-byte relay (audio, images, any endpoint Gantry does not know) cannot do: refused before
 * anything is sent. Under `annotate` the call is relayed, unchecked, since results could not be added
 * to the relayed answer either.
 */
function refuseUncheckable(
  gantry: Gantry,
  name: string,
  namespace: string,
  principal: Parameters<typeof activeSafety>[2],
  path: string,
): void {
  const active = activeSafety(gantry.safety, namespace, principal);
  if (active === undefined) return;
  const { policy } = active;
  const does =
    policy.mode === 'block'
      ? policy.redact.length > 0
        ? 'blocks flagged prompts and masks personal data'
        : 'blocks flagged prompts'
      : policy.redact.length > 0
        ? 'masks personal data'
        : undefined;
  if (does === undefined) return;
  throw new GantryError('MODEL_NOT_SUPPORTED', {
    message: `The model ${name} runs under the safety policy "${policy.name}", which ${does}: ${path} is relayed unread, so Gantry cannot apply it there`,
    param: 'model',
  });
}

function pathOf(request: FastifyRequest): string {
  return request.url.split('?')[0] ?? request.url;
}

interface ModelField {
  name: string;
  /** JSON: the parsed body. */
  body?: Record<string, unknown>;
  /** Multipart: where the model's value sits in the raw bytes. */
  valueAt?: { start: number; end: number };
}

function readModel(raw: Buffer, contentType: string): ModelField {
  if (contentType.includes('application/json')) {
    let body: unknown;
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch (err) {
      throw new GantryError('INVALID_REQUEST', { message: `Malformed JSON body: ${(err as Error).message}` });
    }
    const deep = checkJsonDepth(body);
    if (deep) throw deep;
    const name = (body as { model?: unknown } | null)?.model;
    if (typeof name !== 'string' || name === '') throw invalidParameter('model', 'model is required');
    return { name, body: body as Record<string, unknown> };
  }
  if (contentType.includes('multipart/form-data')) {
    // latin1 maps each byte to one character, so string offsets are byte offsets.
    const match = multipartModel(contentType)?.exec(raw.toString('latin1'));
    if (match?.[1]) {
      const end = match.index + match[0].length - 2;
      return {
        name: Buffer.from(match[1], 'latin1').toString('utf8'),
        valueAt: { start: end - match[1].length, end },
      };
    }
    throw invalidParameter('model', 'model is required');
  }
  throw new GantryError('UNSUPPORTED_MEDIA_TYPE', { details: 'Send JSON or multipart/form-data.' });
}

/**
 * The `model` part's value, anchored to the boundary so that only a part's own headers can name it: a
 * file whose content spells `name="model"` must not choose the model (and so the access check).
 */
function multipartModel(contentType: string): RegExp | undefined {
  const match = BOUNDARY.exec(contentType);
  const boundary = match?.[1] ?? match?.[2];
  if (!boundary) return undefined;
  const b = boundary.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(
    `--${b}\\r\\n(?:[^\\r\\n]+\\r\\n)*?[^\\r\\n]*; *name="model"\\r\\n(?:[^\\r\\n]+\\r\\n)*\\r\\n([^\\r\\n]*)\\r\\n`,
  );
}

function renameJsonModel(body: Record<string, unknown>, upstreamModel: string): Buffer {
  return Buffer.from(JSON.stringify({ ...body, model: upstreamModel }));
}

/** The multipart body with only the model's value replaced: every other byte is relayed as it came. */
function renameMultipartModel(
  raw: Buffer,
  at: { start: number; end: number },
  upstreamModel: string,
): Buffer {
  return Buffer.concat([raw.subarray(0, at.start), Buffer.from(upstreamModel, 'utf8'), raw.subarray(at.end)]);
}

async function send(target: ForwardTarget, request: FastifyRequest, body: Buffer, clientSignal: AbortSignal) {
  const headers: Record<string, string> = {};
  for (const [key, value] of Object.entries(request.headers)) {
    if (typeof value === 'string' && !HOP_BY_HOP.has(key)) headers[key] = value;
  }
  Object.assign(headers, target.headers);
  const rest = request.url.slice('/v1'.length);
  const { timeouts } = target;
  const total = AbortSignal.timeout(timeouts.totalMs);
  try {
    return await undiciRequest(target.baseUrl + rest, {
      method: 'POST',
      headers,
      body,
      signal: AbortSignal.any([clientSignal, total]),
      headersTimeout: timeouts.firstByteMs,
      bodyTimeout: timeouts.idleMs,
    });
  } catch (cause) {
    const code = (cause as { code?: string }).code ?? '';
    if (total.aborted || code.endsWith('_TIMEOUT')) {
      throw new GantryError('UPSTREAM_TIMEOUT', {
        message: 'The model provider did not answer in time',
        cause,
      });
    }
    throw new GantryError('UPSTREAM_ERROR', { message: 'The model provider could not be reached', cause });
  }
}
