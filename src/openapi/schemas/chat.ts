/** POST /v1/chat/completions (src/routes/chat.ts): OpenAI's API, its main fields only. */
import type { FastifySchema } from 'fastify';
import { errors, type JsonSchema, jsonOrStream, openObject, unixSeconds, usage } from './common.js';

const message = openObject(['role'], {
  role: { type: 'string', enum: ['system', 'developer', 'user', 'assistant', 'tool'] },
  content: {
    description: 'Text, or an array of parts (text, image_url)',
    type: ['string', 'array', 'null'],
  },
  name: { type: 'string' },
  tool_calls: { type: 'array', items: { type: 'object' } },
  tool_call_id: { type: 'string' },
});

const chatRequest = openObject(['model', 'messages'], {
  model: { type: 'string', description: 'A model’s namespace (GET /v1/models)' },
  messages: { type: 'array', minItems: 1, items: message },
  stream: { type: 'boolean', description: 'Answer as Server-Sent Events' },
  stream_options: {
    type: 'object',
    properties: { include_usage: { type: 'boolean' } },
    additionalProperties: true,
  },
  max_tokens: { type: 'integer', minimum: 1 },
  max_completion_tokens: { type: 'integer', minimum: 1 },
  temperature: { type: 'number', minimum: 0, maximum: 2 },
  top_p: { type: 'number', minimum: 0, maximum: 1 },
  n: { type: 'integer', minimum: 1 },
  stop: { type: ['string', 'array'], items: { type: 'string' }, maxItems: 4 },
  tools: { type: 'array', items: { type: 'object' } },
  tool_choice: { type: ['string', 'object'] },
  response_format: { type: 'object' },
  user: { type: 'string' },
});

const chatCompletion: JsonSchema = {
  type: 'object',
  required: ['id', 'object', 'created', 'model', 'choices'],
  properties: {
    id: { type: 'string' },
    object: { const: 'chat.completion' },
    created: unixSeconds,
    model: { type: 'string', description: 'The model name the request gave' },
    choices: {
      type: 'array',
      items: {
        type: 'object',
        required: ['index', 'message', 'finish_reason'],
        properties: {
          index: { type: 'integer' },
          message: message,
          finish_reason: { type: ['string', 'null'] },
          content_filter_results: { type: 'object', description: 'Under a safety policy (Azure’s shape)' },
        },
        additionalProperties: true,
      },
    },
    usage,
    prompt_filter_results: { type: 'array', description: 'Under a safety policy (Azure’s shape)' },
  },
  additionalProperties: true,
};

export const chatSchema: FastifySchema = {
  summary: 'Create a chat completion',
  description:
    'OpenAI’s chat completions through the model’s providers, with fallback. Fields Gantry does not know ' +
    'are passed to OpenAI-compatible upstreams as they are.',
  tags: ['inference'],
  operationId: 'createChatCompletion',
  body: chatRequest,
  response: {
    200: jsonOrStream(
      'The completion, or with stream: true its chunks',
      chatCompletion,
      '`data: {chat.completion.chunk}` events, then `data: [DONE]`; a failure mid-stream is one `data: {"error": …}` event',
    ),
    ...errors('inference'),
  },
};
