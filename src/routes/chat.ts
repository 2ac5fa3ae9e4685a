import type { FastifyInstance } from 'fastify';
import type { JsonObject } from '../../providers/types.js';
import type { Gantry } from '../app.js';
import { rejectOtherMethods } from '../error-handler.js';
import { clientGoneSignal } from '../inference/client.js';
import { dispatch } from '../inference/dispatch.js';
import { isRoleOnlyChunk } from '../inference/preamble.js';
import { renameModel, renameModelInEvent } from '../inference/rename.js';
import { resolveInferenceModel } from '../inference/resolve.js';
import { sendStream } from '../inference/stream-reply.js';
import { applyDefaults, validateChat } from '../inference/validate.js';

/** POST /v1/chat/completions (spec 4.9): JSON or SSE, through the model's providers in order. */
export function registerChatRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.post('/v1/chat/completions', async (request, reply) => {
    const body = validateChat(request.body);
    const requested = body.model as string;
    const model = resolveInferenceModel(gantry, request, requested, 'chat');
    const upstreamBody = applyDefaults(body, model.entry.defaults);
    const signal = clientGoneSignal(reply);
    const { result, upstreamModel } = await dispatch(
      gantry,
      model,
      upstreamBody,
      (provider, b, ctx) => provider.chat(b, ctx),
      signal,
      String(request.id),
      { isPreamble: isRoleOnlyChunk, log: request.log },
    );
    if (result.kind === 'json') return renameModel(result.body as JsonObject, requested);
    await sendStream(request, reply, result.events, {
      writeDone: true,
      ...(upstreamModel === requested ? {} : { transform: renameModelInEvent(upstreamModel, requested) }),
    });
  });
  rejectOtherMethods(app, '/v1/chat/completions', ['POST']);
}
