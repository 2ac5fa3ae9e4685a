import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { FastPath } from './fast-path.js';

/** The server settings fastify applies to the server it makes itself, read from its resolved options. */
interface ServerTimings {
  keepAliveTimeout?: unknown;
  requestTimeout?: unknown;
  connectionTimeout?: unknown;
  maxRequestsPerSocket?: unknown;
}

/**
 * fastify's `serverFactory`: a node:http server that offers each request to the fast path first and
 * hands the rest to fastify. `fastPath()` is read per request because the fast path is built after
 * fastify (it needs the assembled Gantry); until then every request goes to fastify.
 */
export function fastPathServerFactory(fastPath: () => FastPath | undefined) {
  return (
    fastify: (req: IncomingMessage, res: ServerResponse) => void,
    options: Record<string, unknown>,
  ): Server => {
    const server = createServer((req, res) => {
      const fast = fastPath();
      if (fast === undefined || !fast.take(req, res)) fastify(req, res);
    });
    // What fastify does for a server it creates (lib/server.js), which it skips for a factory's server.
    const timings = options as ServerTimings;
    if (typeof timings.keepAliveTimeout === 'number') server.keepAliveTimeout = timings.keepAliveTimeout;
    if (typeof timings.requestTimeout === 'number') server.requestTimeout = timings.requestTimeout;
    if (typeof timings.connectionTimeout === 'number') server.setTimeout(timings.connectionTimeout);
    if (typeof timings.maxRequestsPerSocket === 'number' && timings.maxRequestsPerSocket > 0) {
      server.maxRequestsPerSocket = timings.maxRequestsPerSocket;
    }
    return server;
  };
}
