/** POST /v1/embeddings (src/routes/embeddings.ts). */
import type { FastifySchema } from 'fastify';
import { errors, json, openObject, usage } from './common.js';

export const embeddingsSchema: FastifySchema = {
  summary: 'Create embeddings',
  tags: ['inference'],
  operationId: 'createEmbeddings',
  body: openObject(['model', 'input'], {
    model: { type: 'string' },
    input: {
      description: 'A text, texts, or token arrays',
      type: ['string', 'array'],
    },
    encoding_format: { type: 'string', enum: ['float', 'base64'] },
    dimensions: { type: 'integer', minimum: 1 },
    user: { type: 'string' },
  }),
  response: {
    200: json('The embeddings', {
      type: 'object',
      required: ['object', 'data', 'model'],
      properties: {
        object: { const: 'list' },
        data: {
          type: 'array',
          items: {
            type: 'object',
            required: ['object', 'embedding', 'index'],
            properties: {
              object: { const: 'embedding' },
              embedding: {
                description: 'Numbers, or a base64 string of float32 with encoding_format: base64',
                type: ['array', 'string'],
                items: { type: 'number' },
              },
              index: { type: 'integer' },
            },
          },
        },
        model: { type: 'string' },
        usage,
      },
      additionalProperties: true,
    }),
    ...errors('inference'),
  },
};
