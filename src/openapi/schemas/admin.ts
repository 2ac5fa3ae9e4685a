/** The console's sign-in under /admin/v1 (src/admin/session-routes.ts). */
import type { FastifySchema } from 'fastify';
import { errors, json } from './common.js';

const session = json('The session', {
  type: 'object',
  required: ['role', 'actor', 'account', 'key', 'csrf_token', 'expires_at'],
  properties: {
    role: { type: 'string', enum: ['operator', 'owner'] },
    actor: { type: 'string' },
    account: {
      type: ['object', 'null'],
      description: 'An owner’s account',
      properties: { id: { type: 'string' }, name: { type: 'string' }, tier: { type: 'string' } },
    },
    key: {
      type: ['object', 'null'],
      description: 'The API key an owner signed in with',
      properties: { id: { type: 'string' }, name: { type: 'string' }, prefix: { type: 'string' } },
    },
    csrf_token: {
      type: 'string',
      description: 'Send it as x-csrf-token with every request that changes state',
    },
    expires_at: { type: 'string', format: 'date-time' },
  },
});

export const signInSchema: FastifySchema = {
  summary: 'Sign in to the console',
  description:
    'An admin key makes an operator session, an API key an owner session; the answer sets the session cookie.',
  tags: ['admin'],
  operationId: 'createSession',
  security: [],
  body: {
    type: 'object',
    required: ['key'],
    properties: { key: { type: 'string', minLength: 1, maxLength: 256 } },
  },
  response: { 200: session, ...errors('rest') },
};

export const getSessionSchema: FastifySchema = {
  summary: 'The current console session',
  tags: ['admin'],
  operationId: 'getSession',
  security: [{ consoleSession: [] }],
  response: { 200: session, ...errors('rest') },
};

export const signOutSchema: FastifySchema = {
  summary: 'Sign out of the console',
  tags: ['admin'],
  operationId: 'deleteSession',
  security: [],
  response: {
    200: json('Signed out; the cookie is cleared', {
      type: 'object',
      required: ['signed_out'],
      properties: { signed_out: { const: true } },
    }),
    ...errors('rest'),
  },
};
