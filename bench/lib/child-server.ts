/**
 * The HTTP side every bench child server shares (bench/upstream.ts, bench/anthropic-upstream.ts,
 * bench/bare-proxy.ts): the fakes' /bench/stats counters, long keep-alive so the load's connections stay open, listen on 127.0.0.1 at a
 * random port, report it to the parent over IPC, and exit when the parent goes away (even killed).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A fake upstream: gathers each request body (a chat request is one small read: no concat then) and hands
 * it to `answer`, except `GET /bench/stats`, answered here with `{connections, requests}` so far (the
 * requests `answer` got), which shows connection churn.
 */
export function fakeUpstreamServer(
  answer: (req: IncomingMessage, res: ServerResponse, body: string) => void,
): Server {
  let connections = 0;
  let requests = 0;
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => {
      if (req.method === 'GET' && req.url === '/bench/stats') {
        const stats = JSON.stringify({ connections, requests });
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(stats),
        });
        res.end(stats);
        return;
      }
      requests++;
      const body = parts.length === 1 ? (parts[0] as Buffer).toString() : Buffer.concat(parts).toString();
      answer(req, res, body);
    });
  });
  server.on('connection', () => {
    connections++;
  });
  return server;
}

/** Keep-alive past any bench phase, listen, send `{ready, port, pid}` to the parent, exit with it. */
export function serveChild(server: Server): void {
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 130_000;
  server.listen(0, '127.0.0.1', () => {
    const { port } = server.address() as AddressInfo;
    process.send?.({ ready: true, port, pid: process.pid });
  });
  // The parent owns this process: when it goes (even killed), so does the child.
  process.on('disconnect', () => process.exit(0));
  process.on('SIGTERM', () => process.exit(0));
  process.on('SIGINT', () => process.exit(0));
}
