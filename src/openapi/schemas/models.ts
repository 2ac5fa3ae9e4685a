/** GET /v1/models and GET /v1/models/{slug} (src/routes/models.ts). */
import type { FastifySchema } from 'fastify';
import { errors, type JsonSchema, json } from './common.js';

const STATUS = { type: 'string', enum: ['operational', 'degraded', 'offline'] };

/** The Model object: the spec's fields and OpenAI's (src/catalog.ts toView), with its live status. */
export const modelObject: JsonSchema = {
  type: 'object',
  required: ['id', 'object', 'created', 'owned_by', 'name', 'namespace', 'type', 'vendor', 'status'],
  properties: {
    id: { type: 'string', description: 'OpenAI’s id: the namespace' },
    object: { const: 'model' },
    created: {
      type: 'integer',
      description: 'Unix time, seconds: the config’s `created`, else Gantry’s start',
    },
    owned_by: { type: 'string', description: 'The vendor’s slug' },
    name: { type: 'string' },
    description: { type: 'string' },
    namespace: { type: 'string', description: 'The slug, vendor/model' },
    type: { type: 'string', description: 'text, image, video, audio, …' },
    privacy: { type: 'string', enum: ['public', 'private'] },
    img_url: { type: ['string', 'null'] },
    vendor: {
      type: 'object',
      required: ['name', 'slug'],
      properties: {
        name: { type: 'string' },
        description: { type: 'string' },
        image_url: { type: ['string', 'null'] },
        verified: { type: 'boolean' },
        slug: { type: 'string' },
        metadata: { type: ['object', 'null'] },
      },
    },
    billable: { type: 'boolean' },
    pricing: { type: 'object', description: 'The model’s price (spec 2.1)' },
    capabilities: { type: 'array', items: { type: 'string' } },
    metadata: { type: 'object' },
    status: STATUS,
    status_reason: { type: 'string', description: 'Gantry extension: why the model is not operational' },
    input_schema: { type: 'object', description: 'With fields=input_schema' },
    output_schema: { type: 'object', description: 'With fields=output_schema' },
  },
};

const page = {
  limit: { type: 'integer', minimum: 1, maximum: 100, default: 10 },
  offset: { type: 'integer', minimum: 0, default: 0 },
  page: { type: 'integer', minimum: 1, description: 'With per_page, instead of limit and offset' },
  per_page: { type: 'integer', minimum: 1, maximum: 100, default: 10 },
};

export const listModelsSchema: FastifySchema = {
  summary: 'List the models your key may use',
  description:
    '`models` and `has_more` are a page (ten by default); `data` holds every model that matches, unless ' +
    'the request pages (limit, offset, page or per_page), when it is the same page as `models`.',
  tags: ['models'],
  operationId: 'listModels',
  querystring: {
    type: 'object',
    properties: {
      ...page,
      vendor: { type: 'string', description: 'A vendor’s slug or name' },
      type: { type: 'string' },
      status: STATUS,
    },
  },
  response: {
    200: json('The models', {
      type: 'object',
      required: ['object', 'data', 'models', 'has_more'],
      properties: {
        object: { const: 'list' },
        data: { type: 'array', items: modelObject },
        models: { type: 'array', items: modelObject },
        has_more: { type: 'boolean' },
      },
    }),
    ...errors('rest'),
  },
};

export const getModelSchema: FastifySchema = {
  summary: 'One model',
  tags: ['models'],
  operationId: 'getModel',
  params: {
    type: 'object',
    required: ['slug'],
    properties: { slug: { type: 'string', description: 'vendor/model; the `/` encoded (%2F) or not' } },
  },
  querystring: {
    type: 'object',
    properties: {
      fields: { type: 'string', description: 'input_schema, output_schema or both, comma-separated' },
    },
  },
  response: { 200: json('The model', modelObject), ...errors('rest') },
};
