/**
 * Bench child 2: the bare pass-through proxy, the practical ceiling for a Node gateway. node:http in front,
 * one keep-alive undici Pool behind, and no logic at all: method, path, headers and body go to the upstream,
 * status, headers and body come back as they arrive (streams included, chunk by chunk).
 *
 * The request body is gathered before it is sent on (a chat request is one small TCP read), as any gateway
 * that must look at the body does; the response is piped with undici's stream() straight into the reply.
 *
 * usage: node --import tsx bench/bare-proxy.ts --upstream http://127.0.0.1:PORT [--connections N]
 */
import { createServer, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { serveChild } from './lib/child-server.js';

const { values } = parseArgs({
  options: {
    upstream: { type: 'string' },
    connections: { type: 'string', default: '128' },
  },
});
if (!values.upstream) {
  process.stderr.write('bare-proxy: --upstream is required\n');
  process.exit(2);
}

const pool = new Pool(values.upstream, {
  connections: Math.max(1, Number(values.connections) || 128),
  keepAliveTimeout: 30_000,
});

/** Hop-by-hop headers (RFC 9110 7.6.1) plus host, which undici sets from the origin. */
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'host']);

function forwardable(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value !== undefined && !HOP.has(name)) out[name] = value;
  }
  return out;
}

const server = createServer((req, res) => {
  const parts: Buffer[] = [];
  req.on('data', (chunk: Buffer) => parts.push(chunk));
  req.on('end', () => {
    const body = parts.length === 0 ? null : parts.length === 1 ? parts[0] : Buffer.concat(parts);
    pool.stream(
      {
        method: req.method as 'POST',
        path: req.url ?? '/',
        headers: forwardable(req.headers),
        body: body ?? null,
      },
      ({ statusCode, headers }) => {
        res.writeHead(statusCode, forwardable(headers as IncomingHttpHeaders) as OutgoingHttpHeaders);
        return res;
      },
      (err) => {
        if (!err) return;
        if (!res.headersSent) {
          res.writeHead(502, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: `bare proxy: ${err.message}`, type: 'proxy_error' } }));
        } else {
          res.destroy(err);
        }
      },
    );
  });
});
serveChild(server);
