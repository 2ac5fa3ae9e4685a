/** The status page's e-mail subscriptions (src/status/subscribe-routes.ts): public, only when e-mail is set up. */
import type { FastifySchema } from 'fastify';
import { errors, json, text } from './common.js';

const form = (required: string, description: string) => {
  const schema = {
    type: 'object',
    required: [required],
    properties: { [required]: { type: 'string', description } },
  };
  return {
    content: {
      'application/x-www-form-urlencoded': { schema },
      'application/json': { schema },
    },
  };
};

const tokenQuery = {
  type: 'object',
  properties: { token: { type: 'string', description: 'The token of the e-mail’s link' } },
};

const page = (description: string) => text(description, 'text/html');

export const subscribeSchema: FastifySchema = {
  summary: 'Subscribe an e-mail address to status changes',
  description:
    'Double opt-in: a confirmation link is mailed. A form post answers an HTML page, JSON answers 202.',
  tags: ['status'],
  operationId: 'subscribeToStatus',
  body: form('email', 'One e-mail address'),
  response: {
    200: page('The form’s answer page'),
    202: json('Pending: a confirmation link is on its way if the address can receive mail', {
      type: 'object',
      required: ['status', 'message'],
      properties: { status: { const: 'pending' }, message: { type: 'string' } },
    }),
    ...errors('rest'),
  },
};

export const confirmPageSchema: FastifySchema = {
  summary: 'The confirmation page (a button; a GET confirms nothing)',
  tags: ['status'],
  operationId: 'getSubscriptionConfirmPage',
  querystring: tokenQuery,
  response: {
    200: page('A page with the confirm button'),
    404: page('Unknown or expired token'),
    ...errors('rest'),
  },
};

export const confirmSchema: FastifySchema = {
  summary: 'Confirm a subscription',
  tags: ['status'],
  operationId: 'confirmSubscription',
  querystring: tokenQuery,
  body: form('token', 'The token of the e-mail’s link'),
  response: { 200: page('Confirmed'), 404: page('Unknown or expired token'), ...errors('rest') },
};

export const unsubscribePageSchema: FastifySchema = {
  summary: 'The unsubscribe page (a button; a GET unsubscribes nobody)',
  tags: ['status'],
  operationId: 'getUnsubscribePage',
  querystring: tokenQuery,
  response: {
    200: page('A page with the unsubscribe button'),
    404: page('Unknown token'),
    ...errors('rest'),
  },
};

export const unsubscribeSchema: FastifySchema = {
  summary: 'Unsubscribe (also RFC 8058 one-click)',
  tags: ['status'],
  operationId: 'unsubscribe',
  querystring: tokenQuery,
  body: form('token', 'The token of the e-mail’s link'),
  response: { 200: page('Unsubscribed'), 404: page('Unknown token'), ...errors('rest') },
};
