import type { ServerResponse } from 'node:http';
import type { CallLabels, CallLog } from './inference/exchange.js';
import type { Metrics } from './metrics.js';
import { markArrival } from './routing/overhead.js';

export interface TrackedRequest {
  readonly method: string;
  readonly url: string;
  readonly log: CallLog;
  labels: CallLabels;
}

/** Query parameters that are credentials (Cog callback tokens, file-link signatures): never logged. */
const SECRET_QUERY = /([?&](?:token|signature)=)[^&]*/gi;

function loggableUrl(url: string): string {
  return url.includes('?') ? url.replace(SECRET_QUERY, '$1[redacted]') : url;
}

/** Starts tracking one request: `route` is its route pattern, or 'unmatched'. */
export type RequestTracker = (request: TrackedRequest, res: ServerResponse, route: string) => void;

/**
 * Counts every HTTP request in the metrics, and logs one line for it at info level, when its response
 * closes: 'close' fires for every response, hijacked streams and abandoned requests included. Used by
 * fastify's first onRequest hook (so refused requests count too) and by the fast path.
 */
export function requestTracker(metrics: Metrics, logLevel: string): RequestTracker {
  const logRequests = logLevel === 'trace' || logLevel === 'debug' || logLevel === 'info';
  return (request, res, route) => {
    const started = performance.now();
    markArrival(res, started);
    request.labels = { model: 'none', provider: 'none' };
    // 'close' comes once per response: `on` spares the wrapper `once` allocates per request.
    res.on('close', () => {
      const seconds = (performance.now() - started) / 1000;
      const status = res.statusCode;
      const { model, provider } = request.labels;
      metrics.requestDone(route, request.method, status, model, provider, seconds);
      if (logRequests)
        request.log.info(
          { method: request.method, url: loggableUrl(request.url), status, ms: seconds * 1000 },
          'request',
        );
    });
  };
}
