/** The Responses API: POST /v1/responses (src/routes/responses.ts) and its stored responses (responses-stored.ts). */
import type { FastifySchema } from 'fastify';
import { errors, idParams, type JsonSchema, json, jsonOrStream, openObject, unixSeconds } from './common.js';

const responseObject: JsonSchema = {
  type: 'object',
  required: ['id', 'object', 'created_at', 'status', 'model', 'output'],
  properties: {
    id: { type: 'string' },
    object: { const: 'response' },
    created_at: unixSeconds,
    status: { type: 'string', description: 'completed, incomplete, failed, in_progress, …' },
    model: { type: 'string' },
    output: {
      type: 'array',
      description: 'message, function_call and reasoning items',
      items: { type: 'object', required: ['type'], properties: { type: { type: 'string' } } },
    },
    output_text: { type: 'string' },
    previous_response_id: { type: ['string', 'null'] },
    usage: { type: ['object', 'null'] },
    incomplete_details: { type: ['object', 'null'] },
    error: { type: ['object', 'null'] },
  },
  additionalProperties: true,
};

export const createResponseSchema: FastifySchema = {
  summary: 'Create a model response',
  description:
    'Passed through where every provider of the model speaks the Responses API; otherwise bridged onto chat ' +
    'completions (function tools, structured output, images, reasoning, previous_response_id).',
  tags: ['inference'],
  operationId: 'createResponse',
  body: openObject(['model'], {
    model: { type: 'string' },
    input: { description: 'A text, or an array of input items', type: ['string', 'array'] },
    instructions: { type: ['string', 'null'] },
    previous_response_id: { type: ['string', 'null'] },
    stream: { type: 'boolean' },
    store: { type: 'boolean', default: true },
    max_output_tokens: { type: 'integer', minimum: 1 },
    temperature: { type: 'number' },
    top_p: { type: 'number' },
    tools: { type: 'array', items: { type: 'object' } },
    tool_choice: { type: ['string', 'object'] },
    parallel_tool_calls: { type: 'boolean' },
    text: { type: 'object', description: '`format`: json_schema or json_object' },
    reasoning: { type: 'object', description: '`effort`, `summary`' },
    include: { type: 'array', items: { type: 'string' } },
  }),
  response: {
    200: jsonOrStream(
      'The Response, or with stream: true its events',
      responseObject,
      'OpenAI’s Responses events (response.created … response.completed or response.incomplete); a failure mid-stream is an `error` event',
    ),
    ...errors('inference'),
  },
};

export const getResponseSchema: FastifySchema = {
  summary: 'A stored response',
  tags: ['inference'],
  operationId: 'getResponse',
  params: idParams,
  response: { 200: json('The Response', responseObject), ...errors('inference') },
};

export const deleteResponseSchema: FastifySchema = {
  summary: 'Delete a stored response',
  tags: ['inference'],
  operationId: 'deleteResponse',
  params: idParams,
  response: {
    200: json('Deleted', {
      type: 'object',
      required: ['id', 'object', 'deleted'],
      properties: { id: { type: 'string' }, object: { const: 'response' }, deleted: { const: true } },
    }),
    ...errors('inference'),
  },
};

export const listInputItemsSchema: FastifySchema = {
  summary: 'The input items of a stored response',
  description:
    'Its conversation before its answer (earlier responses’ turns included), newest first by default.',
  tags: ['inference'],
  operationId: 'listResponseInputItems',
  params: idParams,
  querystring: {
    type: 'object',
    properties: {
      order: { type: 'string', enum: ['asc', 'desc'], default: 'desc' },
      limit: { type: 'integer', minimum: 1, maximum: 100, default: 20 },
      after: { type: 'string', description: 'An item id: the page after it' },
    },
  },
  response: {
    200: json('A page of items', {
      type: 'object',
      required: ['object', 'data', 'has_more'],
      properties: {
        object: { const: 'list' },
        data: { type: 'array', items: { type: 'object' } },
        first_id: { type: ['string', 'null'] },
        last_id: { type: ['string', 'null'] },
        has_more: { type: 'boolean' },
      },
    }),
    ...errors('inference'),
  },
};
