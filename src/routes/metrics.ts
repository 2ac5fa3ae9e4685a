import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../app.js';
import { GantryError } from '../errors.js';

/**
 * GET /metrics in the Prometheus text format. Outside /v1, so API keys are not needed; when the config
 * names a token, scrapers must send it as a Bearer token.
 */
export function registerMetricsRoute(app: FastifyInstance, gantry: Gantry): void {
  const { metrics, usage } = gantry.services;
  const settings = gantry.config.metrics;
  if (!settings.enabled) return;
  const expected = settings.token ? Buffer.from(`Bearer ${settings.token}`) : undefined;

  app.get('/metrics', async (request, reply) => {
    if (expected) {
      const given = Buffer.from(request.headers.authorization ?? '');
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        throw new GantryError('UNAUTHORIZED', { message: 'The metrics endpoint needs its bearer token' });
      }
    }
    metrics.usagePending.set(usage.stats().queued);
    reply.header('content-type', metrics.registry.contentType);
    return metrics.registry.metrics();
  });
}
