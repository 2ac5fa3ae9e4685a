import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { GantryError, restEnvelope } from '../errors.js';
import type { FastPath } from './fast-path.js';

/** The connection limits of server.* in the config (README, Configuration). */
export interface ConnectionLimits {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  /** 0: no cap. */
  maxConnectionsPerIp: number;
}

/**
 * fastify's `serverFactory`: a node:http server that offers each request to the fast path first and
 * hands the rest to fastify. `fastPath()` is read per request because the fast path is built after
 * fastify (it needs the assembled Gantry); until then every request goes to fastify.
 *
 * It also bounds what a client can hold: headers and the whole request must arrive within their
 * timeouts (Node answers through fastify's clientErrorHandler, 408 REQUEST_TIMEOUT), an idle keep-alive
 * connection is closed, and one client address may hold at most `maxConnectionsPerIp` connections.
 */
export function fastPathServerFactory(fastPath: () => FastPath | undefined, limits: ConnectionLimits) {
  return (
    fastify: (req: IncomingMessage, res: ServerResponse) => void,
    options: Record<string, unknown>,
  ): Server => {
    const server = createBoundedServer(limits, (req, res) => {
      const fast = fastPath();
      if (fast === undefined || !fast.take(req, res)) fastify(req, res);
    });
    // What fastify does for a server it creates (lib/server.js), which it skips for a factory's server.
    const maxRequestsPerSocket = (options as { maxRequestsPerSocket?: unknown }).maxRequestsPerSocket;
    if (typeof maxRequestsPerSocket === 'number' && maxRequestsPerSocket > 0) {
      server.maxRequestsPerSocket = maxRequestsPerSocket;
    }
    return server;
  };
}

/**
 * A node:http server with the config's connection limits (server.* in the README): the API's server and
 * the metrics port's both take them, so neither can be held open by a slow or greedy client.
 */
export function createBoundedServer(
  limits: ConnectionLimits,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Server {
  const server = createServer(
    {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      // How often Node checks those two timeouts (30 s by default, far coarser than they are).
      connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(limits.headersTimeoutMs / 4))),
    },
    (req, res) => {
      // A connection refused over the per-address cap may still deliver a request: nothing to answer.
      if (req.socket.writableEnded) return;
      handler(req, res);
    },
  );
  if (limits.maxConnectionsPerIp > 0) capConnectionsPerIp(server, limits.maxConnectionsPerIp);
  return server;
}

/** Counts open connections per client address; one over the cap gets 429 and is closed. */
function capConnectionsPerIp(server: Server, max: number): void {
  const open = new Map<string, number>();
  const refusal = refusalResponse(max);
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    const count = (open.get(address) ?? 0) + 1;
    if (count > max) {
      socket.on('error', () => {});
      socket.end(refusal);
      socket.destroySoon();
      return;
    }
    open.set(address, count);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left === 0) open.delete(address);
      else open.set(address, left);
    });
  });
}

function refusalResponse(max: number): string {
  const err = new GantryError('RATE_LIMIT_EXCEEDED', {
    message: `Too many open connections from your address (at most ${max})`,
    details: { metric: 'connections', scope: 'address', limit: max, retry_after_seconds: 1 },
  });
  const body = JSON.stringify(restEnvelope(err));
  return (
    'HTTP/1.1 429 Too Many Requests\r\nconnection: close\r\nretry-after: 1\r\n' +
    `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  );
}
