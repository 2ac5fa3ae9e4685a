/**
 * GET and DELETE /v1/responses/{id} (and GET …/input_items). Bridged responses live in Gantry's store;
 * a passed-through response lives with the upstream that made it, and the store keeps only a small
 * record of which provider that was (see `passthroughRecord`), so these calls reach it with Gantry's
 * credentials, and only for the account that created the response.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { InferenceProvider, JsonObject } from '../../providers/types.js';
import { UpstreamError } from '../../providers/upstream-error.js';
import type { Gantry } from '../context.js';
import { rejectOtherMethods } from '../error-handler.js';
import { GantryError, invalidParameter } from '../errors.js';
import { clientGoneSignal } from '../inference/client.js';
import { principalOf } from '../inference/resolve.js';
import { fromUpstream } from '../inference/upstream-errors.js';
import {
  deleteResponseSchema,
  getResponseSchema,
  listInputItemsSchema,
} from '../openapi/schemas/responses.js';
import { conversationItems, itemPage } from '../responses/input-items.js';
import type { ChatMessage } from '../responses/types.js';
import type { StoredResponse } from '../store/types.js';

/** The `object` of a passthrough record's `response`: never a Response, so never served as one. */
const PASSTHROUGH = 'gantry.passthrough_response';

/**
 * The store record of a response an upstream made and keeps. A record rather than an id prefix: ids stay
 * the upstream's own (clients and the upstream agree on previous_response_id without rewriting), and
 * the record scopes GET/DELETE to the creating account, since every account reaches the upstream with
 * the same Gantry credentials.
 */
export function passthroughRecord(
  id: string,
  accountId: string,
  model: string,
  provider: string,
  filtered?: JsonObject,
): StoredResponse {
  return {
    id,
    accountId,
    model,
    createdAt: Math.floor(Date.now() / 1000),
    conversation: [],
    response: { object: PASSTHROUGH, provider, ...(filtered === undefined ? {} : { filtered }) },
  };
}

/** The provider that made a passed-through response; undefined for a bridged one. */
export function passthroughProvider(stored: StoredResponse): string | undefined {
  const r = stored.response;
  return r.object === PASSTHROUGH && typeof r.provider === 'string' ? r.provider : undefined;
}

export function registerStoredResponseRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.get('/v1/responses/:id', { schema: getResponseSchema }, async (request, reply) => {
    const stored = find(gantry, request);
    const provider = passthroughProvider(stored);
    if (provider === undefined) return stored.response;
    // A completion the safety policy blocked: the upstream's copy holds the text the client never got.
    const filtered = stored.response.filtered;
    if (filtered !== null && typeof filtered === 'object') return { ...filtered, model: stored.model };
    const query = queryOf(request);
    if (/(^|&)stream=true(&|$)/.test(query)) {
      throw invalidParameter('stream', 'stream is not supported when retrieving a response through Gantry');
    }
    const path = `/responses/${encodeURIComponent(stored.id)}${query === '' ? '' : `?${query}`}`;
    const body = await upstream(gantry, provider, stored, 'GET', path, reply);
    // The client named the model as Gantry's catalogue does, not as the upstream does.
    return body.object === 'response' ? { ...body, model: stored.model } : body;
  });

  app.delete('/v1/responses/:id', { schema: deleteResponseSchema }, async (request, reply) => {
    const stored = find(gantry, request);
    const provider = passthroughProvider(stored);
    if (provider !== undefined) {
      await upstream(
        gantry,
        provider,
        stored,
        'DELETE',
        `/responses/${encodeURIComponent(stored.id)}`,
        reply,
      );
    }
    gantry.store.deleteResponse(stored.id, stored.accountId);
    return { id: stored.id, object: 'response', deleted: true };
  });
  rejectOtherMethods(app, '/v1/responses/:id', ['GET', 'DELETE']);

  app.get('/v1/responses/:id/input_items', { schema: listInputItemsSchema }, async (request, reply) => {
    const stored = find(gantry, request);
    const provider = passthroughProvider(stored);
    if (provider === undefined) {
      const conversation = stored.conversation as unknown as ChatMessage[];
      return itemPage(conversationItems(conversation, stored.id), request.query);
    }
    const query = queryOf(request);
    const path = `/responses/${encodeURIComponent(stored.id)}/input_items${query === '' ? '' : `?${query}`}`;
    return upstream(gantry, provider, stored, 'GET', path, reply);
  });
  rejectOtherMethods(app, '/v1/responses/:id/input_items', ['GET']);
}

function find(gantry: Gantry, request: FastifyRequest): StoredResponse {
  const { id } = request.params as { id: string };
  const stored = gantry.store.getResponse(id, principalOf(request).account.id);
  if (!stored) throw responseNotFound(id, 'id');
  return stored;
}

async function upstream(
  gantry: Gantry,
  providerName: string,
  stored: StoredResponse,
  method: 'GET' | 'DELETE',
  path: string,
  reply: FastifyReply,
): Promise<JsonObject> {
  const provider: InferenceProvider | undefined = gantry.providers.get(providerName);
  if (!provider?.responseResource) {
    throw new GantryError('MODEL_NOT_SUPPORTED', {
      message: `The provider that made response ${stored.id} no longer serves the Responses API`,
    });
  }
  try {
    return await provider.responseResource(method, path, clientGoneSignal(reply));
  } catch (err) {
    if (!(err instanceof UpstreamError)) throw err;
    // The upstream forgot it (deleted, expired): for the client it is gone, as it would be at OpenAI.
    if (err.failure === 'status' && err.status === 404) {
      if (method === 'DELETE') gantry.store.deleteResponse(stored.id, stored.accountId);
      throw responseNotFound(stored.id, 'id');
    }
    throw fromUpstream(err);
  }
}

function queryOf(request: FastifyRequest): string {
  const url = request.raw.url ?? '';
  const at = url.indexOf('?');
  return at === -1 ? '' : url.slice(at + 1);
}

export function responseNotFound(id: string, param: string): GantryError {
  return new GantryError('RESPONSE_NOT_FOUND', {
    message: `No response with id ${id}`,
    param,
    details: 'Responses are kept only for the account that created them, and not when store was false.',
  });
}
