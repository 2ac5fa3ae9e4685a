/**
 * Starting Gantry as a bench child (bench/run.ts, bench/anthropic.ts, bench/predictions.ts,
 * bench/profile-diff.ts): `serve` on 127.0.0.1 at a random port, read from its "listening" line, with its
 * own data directory, the bench's bootstrap key, and the settings of a production start (quiet logs).
 */
import { type Child, startChild } from './children.js';

export interface GantryChildOptions {
  name: string;
  cwd: string;
  /** Node flags before the binary (launch flags, the orphan guard, --cpu-prof...). */
  nodeFlags: readonly string[];
  bin: string;
  config: string;
  /** After `serve --config FILE`. */
  serveArgs?: readonly string[];
  /** The environment to start from; the settings below win over it. */
  env: NodeJS.ProcessEnv;
  dataDir: string;
  apiKey: string;
}

export function startGantryChild(options: GantryChildOptions): Promise<Child> {
  return startChild({
    name: options.name,
    args: [
      ...options.nodeFlags,
      options.bin,
      'serve',
      '--config',
      options.config,
      ...(options.serveArgs ?? []),
    ],
    cwd: options.cwd,
    env: {
      ...options.env,
      HOST: '127.0.0.1',
      PORT: '0',
      GANTRY_DATA_DIR: options.dataDir,
      GANTRY_BOOTSTRAP_KEY: options.apiKey,
      LOG_LEVEL: 'warn',
      NODE_ENV: 'production',
    },
    ready: /Gantry listening on http:\/\/127\.0\.0\.1:(\d+)/,
  });
}

/** Node flags that write a CPU profile named `name` into `dir` when the process exits. */
export function cpuProfFlags(dir: string, name: string): string[] {
  return ['--cpu-prof', '--cpu-prof-dir', dir, '--cpu-prof-name', name];
}
