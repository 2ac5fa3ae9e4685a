/** The public status page (src/status/routes.ts), /healthz and /metrics: no API key. */
import type { FastifySchema } from 'fastify';
import { errors, json, text } from './common.js';

const notModified = { description: 'Not modified (If-None-Match)', type: 'null' };

const statusValue = { type: 'string', enum: ['operational', 'degraded', 'offline'] };

export const statusPageSchema: FastifySchema = {
  summary: 'The status page (HTML)',
  tags: ['status'],
  operationId: 'getStatusPage',
  response: {
    200: text('The page, cached a few seconds (ETag)', 'text/html'),
    304: notModified,
    ...errors('rest'),
  },
};

export const statusJsonSchema: FastifySchema = {
  summary: 'The status page’s data',
  tags: ['status'],
  operationId: 'getStatus',
  response: {
    200: json('The API’s and every public model’s status and uptime, cached a few seconds (ETag)', {
      type: 'object',
      required: ['generated_at', 'history_available', 'status', 'api', 'models'],
      properties: {
        generated_at: { type: 'string', format: 'date-time' },
        history_available: { type: 'boolean' },
        status: statusValue,
        api: { type: 'object', properties: { status: statusValue }, additionalProperties: true },
        models: { type: 'array', items: { type: 'object' } },
      },
    }),
    304: notModified,
    ...errors('rest'),
  },
};

export const statusFeedSchema: FastifySchema = {
  summary: 'Status changes as an Atom feed',
  tags: ['status'],
  operationId: 'getStatusFeed',
  response: { 200: text('The feed', 'application/atom+xml'), 304: notModified, ...errors('rest') },
};

export const healthSchema: FastifySchema = {
  summary: 'Liveness: the process answers',
  tags: ['operations'],
  operationId: 'getHealth',
  response: {
    200: json('Alive', { type: 'object', required: ['status'], properties: { status: { const: 'ok' } } }),
    ...errors('rest'),
  },
};

export const metricsSchema: FastifySchema = {
  summary: 'Prometheus metrics',
  description:
    'Bearer token when the config sets `metrics.token`. Absent when `metrics.port` serves them on a port of their own.',
  tags: ['operations'],
  operationId: 'getMetrics',
  security: [{ metricsToken: [] }, {}],
  response: { 200: text('The Prometheus text format', 'text/plain'), ...errors('rest') },
};
