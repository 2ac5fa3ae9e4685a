import type { FastifyInstance } from 'fastify';
import { CogBackend } from '../../providers/predictions/cog.js';
import type { PredictionBackend } from '../../providers/predictions/types.js';
import { GantryError } from '../errors.js';

const CALLBACK_BODY_LIMIT = 512 * 1024 * 1024;

/**
 * POST /internal/backends/{provider}/{predictionId}?token=…: where Cog servers in async mode send their
 * webhooks. Outside /v1, so no API key: the per-prediction token the backend minted is the credential.
 * Unknown or stale calls get 404, which Cog does not retry.
 */
export function registerBackendCallbackRoutes(
  app: FastifyInstance,
  backends: ReadonlyMap<string, PredictionBackend>,
): void {
  app.post<{ Params: { provider: string; id: string }; Querystring: { token?: string } }>(
    '/internal/backends/:provider/:id',
    // Without an upload URL, Cog's final webhook carries every output file as a data: URI.
    { bodyLimit: CALLBACK_BODY_LIMIT },
    async (request, reply) => {
      const backend = backends.get(request.params.provider);
      const token = request.query.token ?? '';
      const accepted =
        backend instanceof CogBackend && backend.receiveWebhook(request.params.id, token, request.body);
      if (!accepted) throw new GantryError('NOT_FOUND', { message: 'No prediction waits for this callback' });
      return reply.code(200).send({ ok: true });
    },
  );
}
