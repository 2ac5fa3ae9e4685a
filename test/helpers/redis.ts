import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe } from 'vitest';

/**
 * Real redis-server processes for tests, each on its own random port with its own temp dir. In CI a
 * missing redis-server is a failure; locally the Redis suites are skipped with a loud message.
 */

export const redisServerAvailable =
  spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).status === 0;

if (!redisServerAvailable) {
  const message =
    'redis-server is not installed: the Redis suites cannot run (apt-get install -y redis-server)';
  if (process.env.CI) throw new Error(message);
  console.warn(`\n!!! ${message}: SKIPPING them\n`);
}

export interface TestRedis {
  port: number;
  url: string;
  dir: string;
  /** Stops the server (SIGTERM; with AOF on, data survives a restart). */
  stop(): Promise<void>;
  /** Kills the server at once (SIGKILL), as a crash would. */
  kill(): Promise<void>;
  /** Starts it again on the same port and dir. */
  start(): Promise<void>;
  /** Stops it for good and removes the dir. */
  close(): Promise<void>;
}

export interface RedisOptions {
  /** appendonly yes with fsync always, for durability tests. */
  aof?: boolean;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function ping(port: number): Promise<boolean> {
  const res = spawnSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8', timeout: 1000 });
  return res.stdout?.trim() === 'PONG';
}

export async function startRedis(options: RedisOptions = {}): Promise<TestRedis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'gantry-redis-'));
  let child: ChildProcess | undefined;

  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    options.aof ? 'yes' : 'no',
    '--appendfsync',
    'always',
    '--logfile',
    join(dir, 'redis.log'),
  ];

  const start = async () => {
    child = spawn('redis-server', args, { stdio: 'ignore' });
    for (let i = 0; i < 100; i++) {
      if (await ping(port)) return;
      await sleep(50);
    }
    throw new Error(`redis-server did not start on port ${port}`);
  };

  const halt = async (signal: NodeJS.Signals) => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null) return;
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill(signal);
    await exited;
  };

  await start();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    dir,
    start,
    stop: () => halt('SIGTERM'),
    kill: () => halt('SIGKILL'),
    close: async () => {
      await halt('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `describe` for suites that need redis-server: skipped locally (with the warning above) when it is missing. */
export const describeRedis = redisServerAvailable ? describe : describe.skip;
