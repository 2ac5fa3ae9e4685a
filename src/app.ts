import Fastify, { type FastifyInstance, type FastifyServerOptions, LogController } from 'fastify';
import { createProvider } from '../providers/index.js';
import type { InferenceProvider } from '../providers/types.js';
import { Authenticator, type Principal } from './auth/authenticate.js';
import { Catalog } from './catalog.js';
import type { GantryConfig } from './config/types.js';
import { installErrorHandling } from './error-handler.js';
import { loggerOptions } from './logger.js';
import { registerChatRoutes } from './routes/chat.js';
import { registerEmbeddingRoutes } from './routes/embeddings.js';
import { registerForwardRoutes } from './routes/forward.js';
import { registerModelRoutes } from './routes/models.js';
import { registerResponsesRoutes } from './routes/responses.js';
import type { Store } from './store/types.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null;
  }
}

/** Everything a route needs, built once at start. */
export interface Gantry {
  config: GantryConfig;
  store: Store;
  catalog: Catalog;
  providers: ReadonlyMap<string, InferenceProvider>;
  auth: Authenticator;
}

export interface BuildOptions {
  /** pino options, or false for no logs (tests). */
  logger?: FastifyServerOptions['logger'];
}

/** Assembles the fastify app. The caller owns the store; closing the app closes providers and the key batcher. */
export async function buildApp(config: GantryConfig, store: Store, options: BuildOptions = {}) {
  const providers = new Map<string, InferenceProvider>();
  for (const p of config.providers) providers.set(p.name, createProvider(p));

  const gantry: Gantry = {
    config,
    store,
    catalog: new Catalog(config.models, Math.floor(Date.now() / 1000)),
    providers,
    auth: new Authenticator(store),
  };

  const app: FastifyInstance = Fastify({
    logger: options.logger ?? loggerOptions(config.server.logLevel),
    bodyLimit: config.server.bodyLimitBytes,
    // One log line per request (our onResponse hook) instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: 'x-request-id',
    return503OnClosing: true,
    forceCloseConnections: 'idle',
  });

  app.decorateRequest('principal', null);
  // Bodies are JSON (spec 4); fastify's built-in text/plain parser would let other types through.
  app.removeContentTypeParser('text/plain');
  installErrorHandling(app);

  app.get('/healthz', async () => ({ status: 'ok' }));

  // Every /v1 route needs a key; the 404 handler runs after this hook too, so unknown routes stay private.
  app.addHook('onRequest', async (request) => {
    if (request.url.startsWith('/v1/') || request.url === '/v1') {
      request.principal = gantry.auth.authenticate(request);
    }
  });

  app.addHook('onResponse', async (request, reply) => {
    request.log.info(
      { method: request.method, url: request.url, status: reply.statusCode, ms: reply.elapsedTime },
      'request',
    );
  });

  registerModelRoutes(app, gantry);
  registerChatRoutes(app, gantry);
  registerResponsesRoutes(app, gantry);
  registerEmbeddingRoutes(app, gantry);
  await registerForwardRoutes(app, gantry);

  app.addHook('onClose', async () => {
    gantry.auth.close();
    await Promise.all([...providers.values()].map((p) => p.close()));
  });

  return { app, gantry };
}
