/** The Predictions API (src/routes/predictions.ts): create, list, get, cancel, delete, stream, webhooks. */
import type { FastifySchema } from 'fastify';
import { errors, idParams, type JsonSchema, json, text } from './common.js';

const dateTime = { type: 'string', format: 'date-time' };
const nullableDateTime = { type: ['string', 'null'], format: 'date-time' };

/** The Prediction object (src/predictions/serialize.ts). */
const prediction: JsonSchema = {
  type: 'object',
  required: ['id', 'status', 'model', 'input', 'output', 'error', 'created_at', 'urls'],
  properties: {
    id: { type: 'string' },
    status: { type: 'string', enum: ['starting', 'processing', 'succeeded', 'failed', 'canceled'] },
    stream: { type: 'boolean' },
    type: { const: 'inference' },
    model: {
      type: 'object',
      properties: { name: { type: 'string' }, type: { type: 'string' } },
    },
    input: {
      type: 'object',
      description: 'The input, secrets sealed and personal data redacted as the policy says',
    },
    output: { description: 'The model’s output; stored files as signed links, in their place' },
    error: { type: ['string', 'null'] },
    logs: { type: ['string', 'null'] },
    created_at: dateTime,
    started_at: nullableDateTime,
    completed_at: nullableDateTime,
    updated_at: dateTime,
    privacy: { type: 'string' },
    source: { type: 'string' },
    webhook: {
      type: 'object',
      properties: {
        url: { type: ['string', 'null'] },
        events: { type: 'array', items: { type: 'string' } },
      },
    },
    metrics: { type: 'object' },
    metadata: {
      type: 'object',
      description: 'billing (credits_used), storage (files), data_available, safety',
    },
    data_removed: { type: 'boolean' },
    urls: {
      type: 'object',
      properties: {
        get: { type: 'string' },
        cancel: { type: 'string' },
        stream: { type: 'string' },
        delete: { type: 'string' },
      },
    },
  },
  additionalProperties: true,
};

export const createPredictionSchema: FastifySchema = {
  summary: 'Create a prediction',
  description:
    'Queued, then run by a worker. `await: true` or `Prefer: wait[=N]` answers once it finished (or the ' +
    'wait ran out); `Idempotency-Key` makes a retry return the first prediction. /v1/predict is an alias.',
  tags: ['predictions'],
  operationId: 'createPrediction',
  headers: {
    type: 'object',
    properties: {
      'idempotency-key': { type: 'string', maxLength: 255 },
      prefer: { type: 'string', description: 'wait, or wait=N (seconds)' },
      'cancel-after': { type: 'string', description: 'A deadline after which the prediction is canceled' },
    },
  },
  body: {
    type: 'object',
    required: ['model', 'input'],
    properties: {
      model: { type: 'string' },
      input: {
        type: 'object',
        description: 'As the model’s input_schema says (GET /v1/models/{slug}?fields=input_schema)',
      },
      await: { type: 'boolean' },
      stream: { type: 'boolean', description: 'Keep its events for GET …/stream' },
      webhook: {
        type: 'object',
        required: ['url'],
        properties: {
          url: { type: 'string', format: 'uri' },
          events: { type: 'array', items: { type: 'string' } },
          auth_header: { type: 'string' },
          auth_token: { type: 'string' },
        },
        additionalProperties: false,
      },
      safety_check: {},
      safety_checker: {},
      gpu: {},
      width: {},
      height: {},
      num_outputs: {},
      strength: {},
    },
    additionalProperties: false,
  },
  response: { 200: json('The prediction', prediction), ...errors('rest') },
};

/** POST /v1/predict: the same operation under its other name. */
export const predictAliasSchema: FastifySchema = {
  ...createPredictionSchema,
  summary: 'Create a prediction (alias of POST /v1/predictions)',
  operationId: 'createPredictionAlias',
};

export const listPredictionsSchema: FastifySchema = {
  summary: 'Your predictions, newest first',
  tags: ['predictions'],
  operationId: 'listPredictions',
  querystring: {
    type: 'object',
    properties: {
      per_page: { type: 'integer', minimum: 1, maximum: 50, default: 15 },
      page: { type: 'integer', minimum: 1, default: 1 },
      model: { type: 'string' },
      from: { type: 'string', format: 'date', description: 'YYYY-MM-DD, UTC' },
      to: { type: 'string', format: 'date', description: 'YYYY-MM-DD, UTC, the whole day' },
    },
  },
  response: {
    200: json('A page of predictions', {
      type: 'object',
      required: ['data', 'pagination'],
      properties: {
        data: { type: 'array', items: prediction },
        pagination: {
          type: 'object',
          properties: {
            current_page: { type: 'integer' },
            per_page: { type: 'integer' },
            total: { type: 'integer' },
            last_page: { type: 'integer' },
          },
        },
      },
    }),
    ...errors('rest'),
  },
};

export const getPredictionSchema: FastifySchema = {
  summary: 'One prediction',
  tags: ['predictions'],
  operationId: 'getPrediction',
  params: idParams,
  response: { 200: json('The prediction', prediction), ...errors('rest') },
};

const deleted = json('Deleted', {
  type: 'object',
  required: ['success'],
  properties: { success: { const: true } },
});

export const deletePredictionSchema: FastifySchema = {
  summary: 'Delete a prediction, its files and its pending webhooks',
  tags: ['predictions'],
  operationId: 'deletePrediction',
  params: idParams,
  response: { 200: deleted, ...errors('rest') },
};

/** DELETE and POST …/{id}/delete (the spec's form): one route, two methods (the POST's id gets `-post`). */
export const deletePredictionActionSchema: FastifySchema = {
  summary: 'Delete a prediction (the spec’s …/delete form; DELETE or POST)',
  tags: ['predictions'],
  operationId: 'deletePredictionAction',
  params: idParams,
  response: { 200: deleted, ...errors('rest') },
};

export const cancelPredictionSchema: FastifySchema = {
  summary: 'Cancel a prediction that has not finished',
  tags: ['predictions'],
  operationId: 'cancelPrediction',
  params: idParams,
  response: {
    200: json('Canceled', {
      type: 'object',
      required: ['success', 'status', 'prediction'],
      properties: { success: { const: true }, status: { type: 'string' }, prediction },
    }),
    ...errors('rest'),
  },
};

export const streamPredictionSchema: FastifySchema = {
  summary: 'A prediction’s events (Server-Sent Events)',
  description:
    'Replayed from the start, then live: `output`, `logs`, `error`, `done`. Only for predictions made with stream: true.',
  tags: ['predictions'],
  operationId: 'streamPrediction',
  params: idParams,
  response: { 200: text('The event stream', 'text/event-stream'), ...errors('rest') },
};

export const predictionWebhooksSchema: FastifySchema = {
  summary: 'The delivery log of a prediction’s webhooks (Gantry extension)',
  tags: ['predictions'],
  operationId: 'listPredictionWebhooks',
  params: idParams,
  response: {
    200: json('Deliveries', {
      type: 'object',
      required: ['data'],
      properties: {
        data: {
          type: 'array',
          items: {
            type: 'object',
            properties: {
              id: { type: 'string' },
              event: { type: 'string' },
              state: { type: 'string' },
              attempts: { type: 'integer' },
              created_at: dateTime,
              next_attempt_at: nullableDateTime,
              log: { type: 'array', items: { type: 'object' } },
            },
          },
        },
      },
    }),
    ...errors('rest'),
  },
};

export const webhookSecretSchema: FastifySchema = {
  summary: 'Your account’s webhook signing secret',
  tags: ['predictions'],
  operationId: 'getWebhookSecret',
  response: {
    200: json('The secret', {
      type: 'object',
      required: ['key'],
      properties: { key: { type: 'string', description: 'whsec_…' } },
    }),
    ...errors('rest'),
  },
};
