import Fastify, {
  type FastifyInstance,
  type FastifyRequest,
  type FastifyServerOptions,
  LogController,
} from 'fastify';
import { createProvider, INFERENCE_KINDS } from '../providers/index.js';
import type { InferenceProvider } from '../providers/types.js';
import { createControlPlane } from './admin/plane.js';
import { registerAdminRoutes } from './admin/routes.js';
import { Authenticator, type Principal } from './auth/authenticate.js';
import { LocalDiskBlobStore } from './blobs/local.js';
import { registerBlobRoutes } from './blobs/routes.js';
import { FILES_PATH } from './blobs/signed-url.js';
import { Catalog } from './catalog.js';
import type { GantryConfig } from './config/types.js';
import { registerConsoleRoutes } from './console/routes.js';
import type { Gantry } from './context.js';
import { clientError, frameworkError, installErrorHandling, MAX_PARAM_LENGTH } from './error-handler.js';
import { GantryError } from './errors.js';
import { FastPath } from './fast-path/fast-path.js';
import { nextRequestId } from './fast-path/request-id.js';
import { INFERENCE_ROUTES } from './fast-path/routes.js';
import { fastPathServerFactory } from './fast-path/server.js';
import { checkJsonDepth } from './json-depth.js';
import { loggerOptions } from './logger.js';
import { schemasDocumentOnly } from './openapi/document-only.js';
import { OPENAPI_PATH } from './openapi/path.js';
import { registerOpenApi } from './openapi/routes.js';
import { healthSchema } from './openapi/schemas/status.js';
import { createBackends, createPredictions, loadModelSchemas, type Role } from './predictions/setup.js';
import { parseQuery, repeatedParameter } from './query.js';
import { requestTracker } from './request-tracking.js';
import { registerBackendCallbackRoutes } from './routes/backend-callbacks.js';
import { registerChatRoutes } from './routes/chat.js';
import { registerEmbeddingRoutes } from './routes/embeddings.js';
import { registerForwardRoutes } from './routes/forward.js';
import { registerMetricsRoute } from './routes/metrics.js';
import { registerModelRoutes } from './routes/models.js';
import { registerPredictionRoutes } from './routes/predictions.js';
import { registerResponsesRoutes } from './routes/responses.js';
import { createRouting } from './routing/setup.js';
import type { Safety } from './safety/engine.js';
import { keyPoliciesById } from './safety/policy.js';
import { buildClassifiers, closeClassifiers } from './safety/registry.js';
import { createServices } from './services.js';
import { registerStatusRoutes } from './status/routes.js';
import { registerSubscribeRoutes } from './status/subscribe-routes.js';
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

export interface BuildOptions {
  /** pino options, or false for no logs (tests). */
  logger?: FastifyServerOptions['logger'];
  /** Process-wide metrics (GC, memory); off in tests that build many apps in one process. */
  processMetrics?: boolean;
  /** `api` serves HTTP, `worker` runs predictions and webhooks, `all` (the default) does both. */
  role?: Role;
  /** Serve the inference routes from node:http directly (src/fast-path); on unless false. */
  fastPath?: boolean;
}

/** Assembles the fastify app. The caller owns the store; closing the app closes providers and the key batcher. */
export async function buildApp(config: GantryConfig, store: SqliteStore, options: BuildOptions = {}) {
  const role = options.role ?? 'all';
  const providers = new Map<string, InferenceProvider>();
  for (const p of config.providers) if (INFERENCE_KINDS.has(p.kind)) providers.set(p.name, createProvider(p));

  let fastPath: FastPath | undefined;
  const app: FastifyInstance = Fastify({
    logger: options.logger ?? loggerOptions(config.server.logLevel),
    bodyLimit: config.server.bodyLimitBytes,
    // request.ip and request.protocol (sign-in throttle, subscription limits, Secure cookies) read the
    // forwarded headers only from the proxies the operator names.
    trustProxy: config.server.trustProxy,
    // One log line per request (our onResponse hook) instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    requestIdHeader: 'x-request-id',
    genReqId: nextRequestId,
    serverFactory: fastPathServerFactory(() => fastPath, config.server),
    // Requests that arrive while closing get 503 SERVICE_UNAVAILABLE from the hook below, in the envelope.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    routerOptions: { querystringParser: parseQuery, maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: frameworkError,
    clientErrorHandler: clientError,
  });

  // Absolute URLs (prediction urls, file links, Cog callbacks) need the origin: the configured public
  // URL, else the address this server listens on (known once listening; port 0 in tests).
  const publicUrl = (): string => {
    if (config.server.publicUrl) return config.server.publicUrl.replace(/\/+$/, '');
    const address = app.server.address();
    if (address && typeof address === 'object') {
      const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      return `http://${host}:${address.port}`;
    }
    return `http://${config.server.host}:${config.server.port}`;
  };
  const backends = createBackends(config, () => `${publicUrl()}/internal/backends`);
  const pendingSchemas = await loadModelSchemas(config.models, backends, app.log);

  const services = createServices(config, store, {
    log: app.log,
    ...(options.processMetrics === undefined ? {} : { processMetrics: options.processMetrics }),
  });
  const catalog = new Catalog(config.models, Math.floor(Date.now() / 1000));
  const safety: Safety = {
    table: config.safety.table,
    // Read once the config's keys are stored: a key policy follows the key, not its name (README, "Policies").
    byKeyId: keyPoliciesById(config.safety.table, (hash) => store.findKeyByHash(hash)?.key.id),
    classifiers: buildClassifiers(config.safety.classifiers),
    streamWindowChars: config.safety.streamWindowChars,
  };
  const predictions = createPredictions({
    config,
    store,
    services,
    catalog,
    backends,
    inference: providers,
    safety,
    log: app.log,
    publicUrl,
    pendingSchemas,
  });
  const routing = createRouting(config, store, services.metrics, app.log);
  const plane = createControlPlane(
    { config, store, catalog, routing, metrics: services.metrics, log: app.log, publicUrl },
    predictions.deps.secretKey,
  );
  const gantry: Gantry = {
    config,
    store,
    services,
    catalog,
    providers,
    auth: new Authenticator(store, services.access),
    predictions,
    safety,
    routing,
    plane,
  };
  const metrics = gantry.services.metrics;

  app.decorateRequest('principal', null);
  app.decorateRequest('errorId', null);
  app.decorateRequest('labels', null as unknown as { model: string; provider: string });
  // Bodies are JSON (spec 4); fastify's built-in text/plain parser would let other types through.
  app.removeContentTypeParser('text/plain');
  // fastify's JSON parser (same errors, same prototype checks), and a cap on nesting (src/json-depth.ts).
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, text, done) => {
    parseJson(request, text as string, (error: Error | null, body?: unknown) => {
      if (error) return done(error, undefined);
      const deep = checkJsonDepth(body);
      return deep ? done(deep, undefined) : done(null, body);
    });
  });
  installErrorHandling(app);
  schemasDocumentOnly(app);
  // Every route and method, for the fuzz command (scripts/fuzz.ts).
  const routes: Array<{ method: string; url: string }> = [];
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) routes.push({ method, url: route.url });
  });

  const track = requestTracker(metrics, app.log.level);
  // First hook, so refused requests are counted too.
  app.addHook('onRequest', (request, reply, done) => {
    track(request, reply.raw, request.routeOptions.url ?? 'unmatched');
    done();
  });

  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    // The predictions' grace runs alongside the HTTP drain, bounded by the same deadline (README, "Shutdown").
    predictions.drain().catch((err: Error) => app.log.error({ err: err.message }, 'prediction drain failed'));
    done();
  });
  // Every /v1 route needs a key; the 404 handler runs after this hook too, so unknown routes stay private.
  app.addHook('onRequest', async (request, reply) => {
    if (closing) {
      reply.header('connection', 'close');
      throw new GantryError('SERVICE_UNAVAILABLE', {
        message: 'The server is shutting down',
        headers: { 'retry-after': '1' },
      });
    }
    // The matched route decides (the router decodes the path: /%76%31/chat/completions is that route),
    // else the raw path (an unknown /v1 route stays private).
    const path = request.routeOptions.url ?? request.url;
    if (needsKey(path) || needsKey(request.url)) request.principal = authenticateV1(gantry, request);
    const repeated = repeatedParameter(request.query);
    if (repeated) throw repeated;
    // A request without a body has none to parse whatever its Content-Type says: routes that take no
    // body accept it, routes that need one refuse a missing body as they would refuse any other.
    const headers = request.headers;
    if (
      headers['content-type'] !== undefined &&
      headers['transfer-encoding'] === undefined &&
      (headers['content-length'] === undefined || headers['content-length'] === '0')
    ) {
      delete headers['content-type'];
    }
  });

  // Before the routes: the document is built from the schemas of the routes registered after it.
  if (role !== 'worker') await registerOpenApi(app, gantry);
  app.get('/healthz', { schema: healthSchema }, async () => ({ status: 'ok' }));
  registerMetricsRoute(app, gantry);
  registerBackendCallbackRoutes(app, backends, config.server.callbackBodyLimitBytes);
  if (role !== 'worker') {
    registerModelRoutes(app, gantry);
    registerStatusRoutes(app, gantry);
    registerSubscribeRoutes(app, gantry);
    registerAdminRoutes(app, gantry);
    registerConsoleRoutes(app, gantry);
    registerChatRoutes(app, gantry);
    registerResponsesRoutes(app, gantry);
    registerEmbeddingRoutes(app, gantry);
    registerPredictionRoutes(app, predictions.deps);
    // An S3 bucket serves its pre-signed links itself; the local store's links are served here.
    const blobs = predictions.deps.blobs;
    if (blobs instanceof LocalDiskBlobStore)
      registerBlobRoutes(app, { store: blobs, secret: predictions.blobSecret });
    await registerForwardRoutes(app, gantry);
  }

  await gantry.services.ready();
  // Workers start once the origin is known: recovered jobs build webhook bodies with absolute URLs.
  if (role !== 'api') app.addHook('onListen', async () => predictions.startWorkers());
  if (options.fastPath !== false && role !== 'worker') {
    fastPath = new FastPath(app, { gantry, routes: INFERENCE_ROUTES, track });
  }

  app.addHook('onClose', async () => {
    gantry.auth.close();
    // The drained requests' usage is written before waiting on anything slow (the predictions' end).
    await gantry.services.usage.flush();
    await predictions.close();
    await gantry.routing.close();
    await plane.close();
    await gantry.services.close();
    await Promise.all([...providers.values()].map((p) => p.close()));
    await closeClassifiers(safety.classifiers);
  });

  return { app, gantry, routes };
}

/** Every /v1 path needs a key, but the signed output-file links and the OpenAPI document. */
function needsKey(path: string): boolean {
  return (
    (path.startsWith('/v1/') || path === '/v1') &&
    !path.startsWith(FILES_PATH) &&
    !path.startsWith(OPENAPI_PATH)
  );
}

/**
 * The caller of a /v1 route: an API key (x-api-key or Bearer), else a console session's cookie with its
 * CSRF token (the playground and the prediction form, README "Console"), else 401.
 */
function authenticateV1(gantry: Gantry, request: FastifyRequest): Principal {
  const headers = request.headers;
  if (
    headers.authorization === undefined &&
    headers['x-api-key'] === undefined &&
    headers.cookie !== undefined
  ) {
    const principal = gantry.plane.auth.principalFromSession(request);
    if (principal !== undefined) return principal;
  }
  return gantry.auth.authenticate(request);
}
