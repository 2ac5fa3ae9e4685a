import type { FastifyInstance } from 'fastify';
import { CogBackend } from '../../providers/predictions/cog.js';
import type { PredictionBackend } from '../../providers/predictions/types.js';
import { GantryError } from '../errors.js';
import { internalSchema } from '../openapi/schemas/forward.js';

type CallbackRequest = { Params: { provider: string; id: string }; Querystring: { token?: string } };

/**
 * POST /internal/backends/{provider}/{predictionId}?token=…: where Cog servers in async mode send their
 * webhooks. Outside /v1, so no API key: the per-prediction token the backend minted is the credential,
 * checked before the body is read, so a caller without one costs no memory. Bodies are capped at
 * server.callback_body_limit_bytes: without an upload URL, Cog's webhooks carry every output file
 * inline as a base64 data: URL. Unknown or stale calls get 404, which Cog does not retry.
 */
export function registerBackendCallbackRoutes(
  app: FastifyInstance,
  backends: ReadonlyMap<string, PredictionBackend>,
  bodyLimit: number,
): void {
  const backendFor = (provider: string, id: string, token: string | undefined): CogBackend => {
    const backend = backends.get(provider);
    if (!(backend instanceof CogBackend) || !backend.expectsWebhook(id, token ?? '')) {
      throw new GantryError('NOT_FOUND', { message: 'No prediction waits for this callback' });
    }
    return backend;
  };
  app.post<CallbackRequest>(
    '/internal/backends/:provider/:id',
    {
      bodyLimit,
      schema: internalSchema,
      onRequest: async (request, reply) => {
        try {
          backendFor(request.params.provider, request.params.id, request.query.token);
        } catch (error) {
          // The body is never read: close the connection after the answer instead of draining it.
          reply.header('connection', 'close');
          throw error;
        }
      },
    },
    async (request, reply) => {
      const { provider, id } = request.params;
      const backend = backendFor(provider, id, request.query.token);
      if (!backend.receiveWebhook(id, request.query.token ?? '', request.body)) {
        throw new GantryError('NOT_FOUND', { message: 'No prediction waits for this callback' });
      }
      return reply.code(200).send({ ok: true });
    },
  );
}
