/** GET/HEAD /v1/files/{path} (src/blobs/routes.ts): output files behind signed links. */
import type { FastifySchema } from 'fastify';
import { errors } from './common.js';

export const fileSchema: FastifySchema = {
  summary: 'An output file (signed link; no key)',
  description:
    'The links in a prediction’s `output` and `metadata.storage.files`. The signature is the credential. ' +
    'Single byte ranges (Range, If-Range) and ETag / If-None-Match are supported.',
  tags: ['predictions'],
  operationId: 'getFile',
  params: {
    type: 'object',
    required: ['path'],
    properties: { path: { type: 'string', description: '<predictionId>/<name>, as the API returned it' } },
  },
  querystring: {
    type: 'object',
    required: ['expires', 'signature'],
    properties: {
      expires: { type: 'string', description: 'Unix time, seconds' },
      signature: { type: 'string' },
    },
  },
  response: {
    200: {
      description: 'The file',
      content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
    },
    206: {
      description: 'The range asked for (Content-Range)',
      content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
    },
    304: { description: 'Not modified (If-None-Match)', type: 'null' },
    ...errors('rest'),
  },
};
