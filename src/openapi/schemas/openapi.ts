/** GET /v1/openapi.json itself. */
import type { FastifySchema } from 'fastify';
import { errors, json } from './common.js';

export const openApiSchema: FastifySchema = {
  summary: 'This document: Gantry’s API as OpenAPI 3.1',
  description: 'Generated at start from the route schemas. Public; cached (ETag, If-None-Match).',
  tags: ['openapi'],
  operationId: 'getOpenApiDocument',
  security: [],
  response: {
    200: json('The OpenAPI document', {
      type: 'object',
      required: ['openapi', 'info', 'paths'],
      properties: { openapi: { const: '3.1.0' }, info: { type: 'object' }, paths: { type: 'object' } },
    }),
    304: { description: 'Not modified (If-None-Match)', type: 'null' },
    // Its URL is under /v1 and not a REST area (src/errors.ts envelopeFor): OpenAI's envelope.
    ...errors('inference'),
  },
};
