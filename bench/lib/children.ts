/**
 * The bench's child processes: start, wait until ready, read their memory and CPU from /proc, and make sure
 * every one of them is gone when the bench ends, however it ends (normal end, error, Ctrl-C, SIGTERM).
 * Each child also has an IPC channel and exits by itself when that channel closes, so even a bench killed
 * with SIGKILL leaves nothing behind.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

export interface Child {
  name: string;
  proc: ChildProcess;
  pid: number;
  port: number;
  /** The last lines the child wrote (stdout and stderr), for error messages. */
  output: string[];
  /** The child's IPC ready message (`ready: 'ipc'` only), with whatever else it reported. */
  info: Record<string, unknown>;
}

export interface StartOptions {
  name: string;
  args: string[];
  cwd: string;
  env?: NodeJS.ProcessEnv;
  /** Ready when the child sends `{ready: true, port}` over IPC, or when a stdout line matches (group 1: port). */
  ready: 'ipc' | RegExp;
  timeoutMs?: number;
}

/**
 * Preloaded into children that are not ours to edit (Gantry): exit when the parent's IPC channel closes.
 * The channel is unref'd so it never keeps the process alive on its own.
 */
export const ORPHAN_GUARD =
  'data:text/javascript,process.channel%3F.unref()%3Bprocess.on(%22disconnect%22%2C()%3D%3Eprocess.exit(0))%3B';

const live = new Set<Child>();
/** Grandchildren (not node) a child started and normally stops itself: killed too if that child is not. */
const adopted = new Set<number>();
const MAX_OUTPUT_LINES = 40;

export function startChild(options: StartOptions): Promise<Child> {
  const proc = spawn(process.execPath, options.args, {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  if (proc.pid === undefined) return Promise.reject(new Error(`${options.name}: could not start`));
  const child: Child = { name: options.name, proc, pid: proc.pid, port: 0, output: [], info: {} };
  live.add(child);
  proc.once('exit', () => live.delete(child));

  return new Promise<Child>((resolve, reject) => {
    let settled = false;
    const settle = (err: Error | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) {
        proc.kill('SIGKILL');
        reject(err);
      } else resolve(child);
    };
    const timeoutMs = options.timeoutMs ?? 20_000;
    const timer = setTimeout(
      () => settle(new Error(`${options.name}: not ready after ${timeoutMs} ms\n${tail(child)}`)),
      timeoutMs,
    );
    const onLine = (line: string) => {
      child.output.push(line);
      if (child.output.length > MAX_OUTPUT_LINES) child.output.shift();
      if (options.ready instanceof RegExp && child.port === 0) {
        const m = options.ready.exec(line);
        if (m) {
          child.port = Number(m[1]);
          settle(null);
        }
      }
    };
    readLines(proc.stdout, onLine);
    readLines(proc.stderr, onLine);
    proc.on('message', (msg: unknown) => {
      const m = msg as { ready?: boolean; port?: number };
      if (options.ready === 'ipc' && m.ready && typeof m.port === 'number' && child.port === 0) {
        child.port = m.port;
        child.info = msg as Record<string, unknown>;
        settle(null);
      }
    });
    proc.once('exit', (code, signal) => {
      settle(
        new Error(`${options.name}: exited before ready (code ${code}, signal ${signal})\n${tail(child)}`),
      );
    });
    proc.once('error', (err) => settle(err));
  });
}

function readLines(stream: NodeJS.ReadableStream | null, onLine: (line: string) => void): void {
  if (!stream) return;
  let buffer = '';
  stream.setEncoding('utf8');
  stream.on('data', (text: string) => {
    buffer += text;
    const lines = buffer.split('\n');
    buffer = lines.pop() ?? '';
    for (const line of lines) if (line.length > 0) onLine(line);
    if (buffer.length > 64 * 1024) buffer = buffer.slice(-1024);
  });
}

export function tail(child: Child): string {
  return child.output.length === 0 ? '(no output)' : child.output.map((l) => `  | ${l}`).join('\n');
}

/** SIGTERM, then SIGKILL after `graceMs`. Resolves once the process has exited. */
export function stopChild(child: Child, graceMs = 5_000): Promise<void> {
  const proc = child.proc;
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
    proc.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    proc.kill('SIGTERM');
  });
}

export async function stopAll(graceMs = 5_000): Promise<void> {
  await Promise.all([...live].map((c) => stopChild(c, graceMs)));
}

/**
 * A process `owner` started (e.g. the redis-server of bench/redis-server.ts) and stops when it exits
 * cleanly. If the owner dies otherwise (SIGKILL from killAllNow, a crash), killAllNow kills this pid too.
 */
export function adoptPid(owner: Child, pid: number): void {
  adopted.add(pid);
  owner.proc.once('exit', (code) => {
    if (code === 0) adopted.delete(pid);
  });
}

/** Synchronous last resort (process 'exit' handler): SIGKILL whatever is still running. */
export function killAllNow(): void {
  for (const child of live) {
    try {
      child.proc.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  for (const pid of adopted) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  adopted.clear();
}

export interface Memory {
  /** Peak resident set size (VmHWM), bytes. */
  peakRss: number;
  /** Current resident set size (VmRSS), bytes. */
  rss: number;
}

export function readMemory(pid: number): Memory | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
    return { peakRss: kb('VmHWM') * 1024, rss: kb('VmRSS') * 1024 };
  } catch {
    return undefined;
  }
}

let ticksPerSecond = 0;

/**
 * CPU time (user + system) a process has used so far, in milliseconds; NaN when unreadable. With `tid`,
 * that thread's only (the main thread's tid is the pid).
 */
export function readCpuMs(pid: number, tid?: number): number {
  if (ticksPerSecond === 0) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  try {
    const stat = readFileSync(
      tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`,
      'utf8',
    );
    // Fields after "(comm) ": state is index 0, utime index 11, stime index 12.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond;
  } catch {
    return Number.NaN;
  }
}
