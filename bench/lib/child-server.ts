/**
 * The HTTP side every bench child server shares (bench/upstream.ts, bench/anthropic-upstream.ts,
 * bench/bare-proxy.ts): long keep-alive so the load's connections stay open, listen on 127.0.0.1 at a
 * random port, report it to the parent over IPC, and exit when the parent goes away (even killed).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A server that gathers each request body (a chat request is one small read: no concat then) and hands it
 * to `answer`; `onConnection` counts the TCP connections for /bench/stats.
 */
export function bufferedServer(
  answer: (req: IncomingMessage, res: ServerResponse, body: string) => void,
  onConnection: () => void,
): Server {
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => {
      const body = parts.length === 1 ? (parts[0] as Buffer).toString() : Buffer.concat(parts).toString();
      answer(req, res, body);
    });
  });
  server.on('connection', onConnection);
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
