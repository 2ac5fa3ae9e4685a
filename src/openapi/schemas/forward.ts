/** POST /v1/{endpoint} (src/routes/forward.ts): other OpenAI endpoints, relayed to the model's provider. */
import type { FastifySchema } from 'fastify';
import { errors } from './common.js';

export const forwardSchema: FastifySchema = {
  summary: 'Any other OpenAI endpoint (audio, images, moderations, …), forwarded',
  description:
    'The `model` is read from the JSON or multipart body; the request goes as it is (the model renamed) to ' +
    'the first OpenAI-compatible provider of that model, and its answer comes back as it is. Only models ' +
    'that declare the `other` api are forwarded, and not under a safety policy that blocks or masks ' +
    '(the body is relayed unread): those get 422 MODEL_NOT_SUPPORTED.',
  tags: ['inference'],
  operationId: 'forwardRequest',
  params: {
    type: 'object',
    required: ['endpoint'],
    properties: {
      endpoint: {
        type: 'string',
        description: 'The rest of the path, e.g. audio/speech or images/generations',
      },
    },
  },
  body: {
    content: {
      'application/json': {
        schema: {
          type: 'object',
          required: ['model'],
          properties: { model: { type: 'string' } },
          additionalProperties: true,
        },
      },
      'multipart/form-data': {
        schema: {
          type: 'object',
          required: ['model'],
          properties: { model: { type: 'string' } },
          additionalProperties: true,
        },
      },
    },
  },
  response: {
    200: {
      description: 'The upstream’s answer, as it sent it (JSON, audio, an event stream, …)',
      content: { '*/*': { schema: {} } },
    },
    ...errors('inference'),
  },
};

/** POST /internal/backends/{provider}/{id}: Cog's webhooks, not part of the API. */
export const internalSchema: FastifySchema = { hide: true };
