import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';
import { GantryError, restEnvelope } from '../errors.js';
import { createBoundedServer } from '../fast-path/server.js';
import { metricsSchema } from '../openapi/schemas/status.js';

/**
 * GET /metrics in the Prometheus text format: on the API's port (outside /v1, so no API key), or on its
 * own port when the config sets `metrics.port`. When the config names a token, scrapers must send it as
 * a Bearer token.
 */
export function registerMetricsRoute(app: FastifyInstance, gantry: Gantry): void {
  const settings = gantry.config.metrics;
  if (!settings.enabled) return;
  const expected = settings.token ? Buffer.from(`Bearer ${settings.token}`) : undefined;
  const authorized = (request: IncomingMessage) => {
    if (!expected) return true;
    const given = Buffer.from(request.headers.authorization ?? '');
    return given.length === expected.length && timingSafeEqual(given, expected);
  };
  const render = async () => {
    const { metrics, usage } = gantry.services;
    metrics.usagePending.set(usage.stats().queued);
    return metrics.registry.metrics();
  };
  const contentType = gantry.services.metrics.registry.contentType;
  const refusal = new GantryError('UNAUTHORIZED', { message: 'The metrics endpoint needs its bearer token' });

  if (settings.port === undefined) {
    app.get('/metrics', { schema: metricsSchema }, async (request, reply) => {
      if (!authorized(request.raw)) throw refusal;
      reply.header('content-type', contentType);
      return render();
    });
    return;
  }

  const fail = (response: ServerResponse, err: GantryError) =>
    response
      .writeHead(err.status, { 'content-type': 'application/json; charset=utf-8' })
      .end(JSON.stringify(restEnvelope(err)));
  const server: Server = createBoundedServer(gantry.config.server, (request, response) => {
    const path = request.url?.split('?')[0];
    if (request.method !== 'GET' || path !== '/metrics') {
      fail(response, new GantryError('NOT_FOUND', { message: 'This port serves GET /metrics only' }));
      return;
    }
    if (!authorized(request)) {
      fail(response, refusal);
      return;
    }
    render().then(
      (text) => response.writeHead(200, { 'content-type': contentType }).end(text),
      (err: unknown) => {
        app.log.error({ err }, 'metrics could not be rendered');
        fail(response, new GantryError('INTERNAL_ERROR'));
      },
    );
  });
  app.addHook('onReady', async () => {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(settings.port, gantry.config.server.host, () => resolve());
    });
    app.log.info({ port: (server.address() as { port: number }).port }, 'metrics listening');
  });
  app.addHook('onClose', async () => {
    if (server.listening) await new Promise((resolve) => server.close(resolve));
  });
  app.decorate('metricsServer', server);
}
