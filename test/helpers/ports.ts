import { createServer } from 'node:net';

/**
 * A TCP port on 127.0.0.1 that was free a moment ago: bound to port 0, read, then released.
 * Nothing listens on it when this returns, so it is also a port where connections are refused.
 */
export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** A port nothing listens on (connecting to it is refused): a just-released free port. */
export const closedPort = freePort;
