/**
 * Counts the Redis commands Gantry sends per request: MONITOR over a window opened and closed by two
 * `INFO commandstats` of our own (which also give the server's totals for the same window). Commands are
 * classified by script SHA (the limiter's scripts, read from the compiled Gantry) or by key, and commands
 * run inside scripts (source "lua") are counted apart: they are not round trips.
 *
 * MONITOR slows Redis down, so this runs apart from the timed phases.
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';

/** What a client command is, for the report: label, and when it happens. */
export interface CommandKind {
  label: string;
  when: string;
  /** On the request path before the upstream call (counts toward round trips per admission). */
  admission: boolean;
}

export interface RedisCount {
  requests: number;
  windowMs: number;
  /** Client commands by label (EVALSHA and EVAL of the same script apart). */
  commands: Array<CommandKind & { command: string; calls: number }>;
  /** Commands run inside scripts during the window, by name (not round trips). */
  insideScripts: Record<string, number>;
  /** INFO commandstats deltas (calls) over the window; counts commands inside scripts too. */
  commandstats: Record<string, number>;
  /** Distinct client connections Gantry used. */
  connections: number;
}

const sha1 = (text: string) => createHash('sha1').update(text).digest('hex');

/**
 * SHA → script name for the limiter's scripts of the Gantry build under test (dist/ next to its bin),
 * so the admission EVALSHA can be told from the release one. Empty when they cannot be read.
 */
export async function scriptNames(gantryBin: string): Promise<Map<string, string>> {
  const names = new Map<string, string>();
  try {
    const url = new URL('../dist/src/limits/redis-scripts.js', pathToFileURL(gantryBin));
    const mod = (await import(url.href)) as Record<string, unknown>;
    for (const [exported, name] of [
      ['ADMIT_LUA', 'admit'],
      ['RELEASE_LUA', 'release'],
      ['EXTEND_LUA', 'extend'],
    ] as const) {
      const lua = mod[exported];
      if (typeof lua === 'string') names.set(sha1(lua), name);
    }
  } catch {
    // another layout: fall back to classifying by key
  }
  return names;
}

function classify(args: string[], scripts: Map<string, string>): { command: string } & CommandKind {
  const command = (args[0] ?? '').toUpperCase();
  if (command === 'EVALSHA' || command === 'EVAL') {
    const sha = command === 'EVALSHA' ? (args[1] ?? '') : sha1(args[1] ?? '');
    const key = args[3] ?? '';
    const name = scripts.get(sha);
    if (name === 'admit')
      return { command, label: 'limiter admit', when: 'request path, before the upstream', admission: true };
    if (name === 'release')
      return { command, label: 'limiter release', when: 'after the response', admission: false };
    if (name === 'extend')
      return { command, label: 'limiter extend', when: 'streams, every lease/3', admission: false };
    if (key.startsWith('gantry:rl:'))
      return { command, label: 'limiter (script not identified)', when: '', admission: false };
    if (key.includes('{usage}'))
      return { command, label: 'usage stream write', when: 'batched, per flush', admission: false };
    if (key.includes('{credits}'))
      return { command, label: 'credit debit', when: 'batched, per flush', admission: false };
    return { command, label: `script on ${key || '(no key)'}`, when: '', admission: false };
  }
  if (command === 'HGET' && (args[1] ?? '').includes('{credits}')) {
    return {
      command,
      label: 'credit balance read',
      when: 'request path, when the 1 s balance cache is cold',
      admission: true,
    };
  }
  return { command, label: (args[1] ?? '').slice(0, 40), when: '', admission: false };
}

function parseCommandstats(info: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out.set(m[1] as string, Number(m[2]));
  return out;
}

/**
 * Opens the window on an idle Gantry (after `settleMs`, so earlier usage is flushed), runs `drive`, waits
 * `settleMs` again (so the usage of these requests is flushed too) and closes it.
 */
export async function countRedisCommands(
  port: number,
  scripts: Map<string, string>,
  settleMs: number,
  drive: () => Promise<number>,
): Promise<RedisCount> {
  const options = { host: '127.0.0.1', port, maxRetriesPerRequest: 1, connectTimeout: 2_000 };
  const client = new Redis(options);
  let monitor: Redis | undefined;
  try {
    monitor = await client.monitor();
    const me = /addr=(\S+)/.exec(String(await client.client('INFO')))?.[1] ?? '';
    const counted = new Map<string, { command: string; calls: number } & CommandKind>();
    const inside: Record<string, number> = {};
    const sources = new Set<string>();
    let state: 'before' | 'in' | 'after' = 'before';
    let closed: () => void = () => undefined;
    const windowClosed = new Promise<void>((resolve) => {
      closed = resolve;
    });
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (source === me) {
        if (args[0]?.toLowerCase() === 'info') {
          if (state === 'before') state = 'in';
          else if (state === 'in') {
            state = 'after';
            closed();
          }
        }
        return;
      }
      if (state !== 'in') return;
      if (source === 'lua') {
        const name = (args[0] ?? '').toUpperCase();
        inside[name] = (inside[name] ?? 0) + 1;
        return;
      }
      sources.add(source);
      const kind = classify(args, scripts);
      const id = `${kind.command} ${kind.label}`;
      const entry = counted.get(id) ?? { ...kind, calls: 0 };
      entry.calls++;
      counted.set(id, entry);
    });

    await sleep(settleMs);
    const before = parseCommandstats(await client.info('commandstats'));
    const t0 = performance.now();
    const requests = await drive();
    await sleep(settleMs);
    const after = parseCommandstats(await client.info('commandstats'));
    const windowMs = performance.now() - t0;
    await Promise.race([windowClosed, sleep(5_000)]);
    // (state changes in the MONITOR callback: read it through a cast, TypeScript cannot see that)
    if ((state as string) !== 'after') throw new Error('MONITOR did not show the end of the window');

    const commandstats: Record<string, number> = {};
    for (const [name, calls] of after) {
      const delta = calls - (before.get(name) ?? 0);
      if (delta > 0 && name !== 'info') commandstats[name] = delta;
    }
    const order = (c: CommandKind) => (c.admission ? 0 : 1);
    return {
      requests,
      windowMs,
      commands: [...counted.values()].sort((a, b) => order(a) - order(b) || b.calls - a.calls),
      insideScripts: inside,
      commandstats,
      connections: sources.size,
    };
  } finally {
    monitor?.disconnect();
    client.disconnect();
  }
}
