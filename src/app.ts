import Fastify, { type FastifyInstance, type FastifyServerOptions, LogController } from 'fastify';
import { createProvider } from '../providers/index.js';
import type { InferenceProvider } from '../providers/types.js';
import { Authenticator, type Principal } from './auth/authenticate.js';
import { Catalog } from './catalog.js';
import type { GantryConfig } from './config/types.js';
import { installErrorHandling } from './error-handler.js';
import { FastPath } from './fast-path/fast-path.js';
import { nextRequestId } from './fast-path/request-id.js';
import { INFERENCE_ROUTES } from './fast-path/routes.js';
import { fastPathServerFactory } from './fast-path/server.js';
import { loggerOptions } from './logger.js';
import { requestTracker } from './request-tracking.js';
import { registerChatRoutes } from './routes/chat.js';
import { registerEmbeddingRoutes } from './routes/embeddings.js';
import { registerForwardRoutes } from './routes/forward.js';
import { registerMetricsRoute } from './routes/metrics.js';
import { registerModelRoutes } from './routes/models.js';
import { registerResponsesRoutes } from './routes/responses.js';
import { createServices, type Services } from './services.js';
import type { SqliteStore } from './store/sqlite.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null;
    /** Bounded metric labels: the catalogue model and the provider that served the request. */
    labels: { model: string; provider: string };
    /** The error id the request ended with, for usage records and metrics. */
    errorId: string | null;
  }
}

/** Everything a route needs, built once at start. */
export interface Gantry {
  config: GantryConfig;
  store: SqliteStore;
  services: Services;
  catalog: Catalog;
  providers: ReadonlyMap<string, InferenceProvider>;
  auth: Authenticator;
}

export interface BuildOptions {
  /** pino options, or false for no logs (tests). */
  logger?: FastifyServerOptions['logger'];
  /** Process-wide metrics (GC, memory); off in tests that build many apps in one process. */
  processMetrics?: boolean;
  /** Serve the inference routes from node:http directly (src/fast-path); on unless false. */
  fastPath?: boolean;
}

/** Assembles the fastify app. The caller owns the store; closing the app closes providers and the key batcher. */
export async function buildApp(config: GantryConfig, store: SqliteStore, options: BuildOptions = {}) {
  const providers = new Map<string, InferenceProvider>();
  for (const p of config.providers) providers.set(p.name, createProvider(p));

  let fastPath: FastPath | undefined;
  const app: FastifyInstance = Fastify({
    logger: options.logger ?? loggerOptions(config.server.logLevel),
    bodyLimit: config.server.bodyLimitBytes,
    // One log line per request (our onResponse hook) instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: 'x-request-id',
    genReqId: nextRequestId,
    serverFactory: fastPathServerFactory(() => fastPath),
    return503OnClosing: true,
    forceCloseConnections: 'idle',
  });

  const gantry: Gantry = {
    config,
    store,
    services: createServices(config, store, {
      log: app.log,
      ...(options.processMetrics === undefined ? {} : { processMetrics: options.processMetrics }),
    }),
    catalog: new Catalog(config.models, Math.floor(Date.now() / 1000)),
    providers,
    auth: new Authenticator(store),
  };
  const metrics = gantry.services.metrics;

  app.decorateRequest('principal', null);
  app.decorateRequest('errorId', null);
  app.decorateRequest('labels', null as unknown as { model: string; provider: string });
  // Bodies are JSON (spec 4); fastify's built-in text/plain parser would let other types through.
  app.removeContentTypeParser('text/plain');
  installErrorHandling(app);

  app.get('/healthz', async () => ({ status: 'ok' }));

  const track = requestTracker(metrics, app.log.level);
  // First hook, so refused requests are counted too.
  app.addHook('onRequest', (request, reply, done) => {
    track(request, reply.raw, request.routeOptions.url ?? 'unmatched');
    done();
  });

  // Every /v1 route needs a key; the 404 handler runs after this hook too, so unknown routes stay private.
  app.addHook('onRequest', async (request) => {
    if (request.url.startsWith('/v1/') || request.url === '/v1') {
      request.principal = gantry.auth.authenticate(request);
    }
  });

  registerMetricsRoute(app, gantry);
  registerModelRoutes(app, gantry);
  registerChatRoutes(app, gantry);
  registerResponsesRoutes(app, gantry);
  registerEmbeddingRoutes(app, gantry);
  await registerForwardRoutes(app, gantry);

  await gantry.services.ready();
  if (options.fastPath !== false) fastPath = new FastPath(app, { gantry, routes: INFERENCE_ROUTES, track });

  app.addHook('onClose', async () => {
    gantry.auth.close();
    await gantry.services.close();
    await Promise.all([...providers.values()].map((p) => p.close()));
  });

  return { app, gantry };
}
