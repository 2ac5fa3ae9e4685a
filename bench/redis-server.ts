/**
 * Bench child 3: a throwaway redis-server for the `gantry-redis` target.
 *
 * Picks a free port on 127.0.0.1, makes a temp dir, starts `redis-server --bind 127.0.0.1 --save ''
 * --appendonly no` in it, waits for PONG, and reports {ready, port, pid (redis-server's), dir, version} to
 * the parent over IPC. Stops redis-server (SIGKILL: nothing to keep) and removes the dir when the parent
 * goes away, on SIGTERM/SIGINT, and exits with an error if redis-server dies on its own.
 *
 * usage: node --import tsx bench/redis-server.ts [--server /path/to/redis-server]
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { server: { type: 'string', default: 'redis-server' } } });
const SERVER = values.server as string;

const dir = mkdtempSync(join(tmpdir(), 'gantry-bench-redis-'));
let redis: ChildProcess | undefined;
let stopping = false;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** One PING over a raw socket (no redis-cli needed). */
function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString();
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

function logTail(): string {
  try {
    return readFileSync(join(dir, 'redis.log'), 'utf8').trim().split('\n').slice(-10).join('\n');
  } catch {
    return '(no redis.log)';
  }
}

async function stop(code: number): Promise<never> {
  stopping = true;
  const proc = redis;
  if (proc && proc.exitCode === null && proc.signalCode === null) {
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill('SIGKILL');
    await exited;
  }
  rmSync(dir, { recursive: true, force: true });
  process.exit(code);
}

process.on('disconnect', () => void stop(0));
process.on('SIGTERM', () => void stop(0));
process.on('SIGINT', () => void stop(0));

async function start(): Promise<number> {
  // A port found free can be taken before redis binds it: try a few.
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const proc = spawn(
      SERVER,
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--save',
        '',
        '--appendonly',
        'no',
        '--logfile',
        join(dir, 'redis.log'),
      ],
      { stdio: 'ignore' },
    );
    redis = proc;
    let exited = false;
    proc.once('exit', () => {
      exited = true;
    });
    proc.once('error', () => {
      exited = true;
    });
    for (let i = 0; i < 100 && !exited; i++) {
      if (await ping(port)) {
        proc.once('exit', (code, signal) => {
          if (stopping) return;
          process.stderr.write(
            `redis-server exited on its own (code ${code}, signal ${signal})\n${logTail()}\n`,
          );
          void stop(1);
        });
        return port;
      }
      await sleep(50);
    }
    if (!exited) proc.kill('SIGKILL');
  }
  throw new Error(`redis-server did not start\n${logTail()}`);
}

try {
  const port = await start();
  const version = /v=(\S+)/.exec(spawnSync(SERVER, ['--version'], { encoding: 'utf8' }).stdout ?? '')?.[1];
  process.send?.({ ready: true, port, pid: redis?.pid, dir, version: version ?? 'unknown' });
} catch (error) {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  await stop(1);
}
