/**
 * Real `gantry serve` processes for end-to-end tests: the TypeScript entry (src/main.ts) run by node with
 * tsx's loader (or, with `built`, the compiled bin/gantry.js, as `npm run chaos` runs it), each process with its own data folder, environment and random port. Every process is
 * remembered, so a suite can stop them all in afterAll (and a safety net kills leftovers when the test
 * worker exits, even after a failure).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const ROOT = new URL('../..', import.meta.url).pathname;
// tsx is resolved from the repo, whatever the process's working directory.
const TSX = pathToFileURL(join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;
const MAIN = join(ROOT, 'src/main.ts');
const BIN = join(ROOT, 'bin/gantry.js');

/** Variables of the test runner's own environment that would change what the child does. */
const INHERITED_OUT = [
  'REDIS_URL',
  'GANTRY_CONFIG',
  'GANTRY_DATA_DIR',
  'GANTRY_BOOTSTRAP_KEY',
  'GANTRY_PUBLIC_URL',
  'PORT',
  'HOST',
  'LOG_LEVEL',
];

export interface GantryProcessOptions {
  /** The YAML config file (`--config`). */
  config: string;
  /** GANTRY_DATA_DIR, also the working directory. */
  dataDir: string;
  /** Extra environment (REDIS_URL, keys...). */
  env?: NodeJS.ProcessEnv;
  /** How long to wait for "Gantry listening on"; default 30 s (cold tsx on a busy machine). */
  startTimeoutMs?: number;
  /** A name for error messages, e.g. "A". */
  name?: string;
  /** Run the compiled bin/gantry.js (`npm run build` first) instead of src/main.ts under tsx. */
  built?: boolean;
}

export interface GantryProcess {
  name: string;
  /** e.g. http://127.0.0.1:PORT/v1 */
  baseURL: string;
  /** e.g. http://127.0.0.1:PORT */
  origin: string;
  pid: number;
  child: ChildProcess;
  /** stdout and stderr so far. */
  output(): string;
  /** Resolves with the exit code (null when killed by a signal) once the process is gone. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** true once the process has exited. */
  readonly dead: boolean;
  /** Sends a signal (no-op once exited). */
  kill(signal: NodeJS.Signals): void;
  /** SIGTERM, then SIGKILL if it is still running after `graceMs` (default 5 s); resolves once it is gone. */
  stop(graceMs?: number): Promise<void>;
}

const running = new Set<GantryProcess>();

// Last resort: a worker that dies (or a suite whose afterAll never ran) must not leave Gantry processes.
process.once('exit', () => {
  for (const p of running) p.child.kill('SIGKILL');
});

export async function spawnGantry(options: GantryProcessOptions): Promise<GantryProcess> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of INHERITED_OUT) delete env[name];
  Object.assign(env, {
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    GANTRY_DATA_DIR: options.dataDir,
    ...options.env,
  });
  const name = options.name ?? 'gantry';
  const entry = options.built ? [BIN] : ['--import', TSX, MAIN];
  const child = spawn(process.execPath, [...entry, 'serve', '--config', options.config], {
    cwd: options.dataDir,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let dead = false;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      dead = true;
      running.delete(proc);
      resolve({ code, signal });
    });
  });
  const kill = (signal: NodeJS.Signals): void => {
    if (!dead) child.kill(signal);
  };
  const proc: GantryProcess = {
    name,
    baseURL: '',
    origin: '',
    pid: child.pid ?? -1,
    child,
    output: () => output,
    exited,
    get dead() {
      return dead;
    },
    kill,
    async stop(graceMs = 5_000) {
      if (dead) return;
      kill('SIGTERM');
      const timer = setTimeout(() => kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
  running.add(proc);

  const listening = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      kill('SIGKILL');
      reject(
        new Error(`gantry ${name} did not start within ${options.startTimeoutMs ?? 30_000} ms:\n${output}`),
      );
    }, options.startTimeoutMs ?? 30_000);
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = /Gantry listening on (\S+)/.exec(output);
      if (match?.[1]) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`gantry ${name} exited (${code ?? signal}) before listening:\n${output}`));
    });
  });
  const baseURL = await listening;
  proc.baseURL = baseURL;
  proc.origin = baseURL.replace(/\/v1$/, '');
  return proc;
}

/** Stops every process still running (SIGTERM, then SIGKILL after `graceMs`). */
export async function stopAllGantry(graceMs = 3_000): Promise<void> {
  await Promise.all([...running].map((p) => p.stop(graceMs)));
}
