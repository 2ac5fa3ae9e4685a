/**
 * The routing lane of `npm run bench` (BENCH_PHASES=routing): what a dead deployment costs once its
 * circuit breaker is open.
 *
 * Its own children: the fake OpenAI-compatible upstream (bench/upstream.ts) and two compiled Gantrys,
 * each serving `bench/routed` through three deployments under the `priority` strategy:
 *   - `gantry-healthy`: three providers, all pointing at the fake;
 *   - `gantry-one-dead`: the same, but the first deployment points at a dead upstream: a TCP server in
 *     this process that accepts and at once drops every connection, and counts them.
 * Before measuring, `gantry-one-dead` gets requests until its dead deployment's circuit is open (a
 * cooldown of an hour keeps it open for the run); from then on the dead server must see no connection.
 * Both targets are then measured in rotating order, round by round: JSON at c=1 (latency p50/p99) and
 * streams at c=1 (time to first content). Verdicts: p50 of gantry-one-dead minus gantry-healthy within
 * 0.1 ms (JSON), and no connection to the dead upstream while measuring (no request waited for it).
 *
 * Settings: BENCH_ROUTING_REQUESTS (c=1 requests per target, phase and round, 2000; quick 500), and
 * run.ts's BENCH_ROUNDS, BENCH_CHUNKS, BENCH_GANTRY_BIN, --quick.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'undici';
import { type Child, ORPHAN_GUARD, startChild, stopChild } from './lib/children.js';
import { envInt, gantryNodeFlags } from './lib/env.js';
import { startGantryChild } from './lib/gantry-child.js';
import { createDispatcher, drive, type PhaseResult, type RequestSpec } from './lib/load.js';
import { round3, summarize } from './lib/stats.js';
import { table } from './lib/table.js';

export interface RoutingLaneOptions {
  root: string;
  quick: boolean;
  rounds: number;
  chunks: number;
  gantryBin: string;
  log: (message: string) => void;
}

export interface RoutingLaneResult {
  text: string;
  json: Record<string, unknown>;
  errors: string[];
}

type LaneTarget = 'gantry-healthy' | 'gantry-one-dead';

const API_KEY = `gty_bench_${randomBytes(24).toString('base64url')}`;
/** The most the dead deployment may add to the JSON p50 once its circuit is open (ms). */
const ADDED_P50_TARGET_MS = 0.1;
const CONSECUTIVE_FAILURES = 3;

function chatSpec(stream: boolean): RequestSpec {
  const body = {
    model: 'bench/routed',
    messages: [{ role: 'user', content: 'Say something short.' }],
    max_tokens: 64,
    ...(stream ? { stream: true } : {}),
  };
  return {
    path: '/v1/chat/completions',
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${API_KEY}`,
      'user-agent': 'gantry-bench/0.1',
    },
    body: Buffer.from(JSON.stringify(body)),
    stream,
  };
}

function gantryYaml(upstreamPort: number, firstPort: number): string {
  const provider = (port: number) =>
    `{ kind: openai, base_url: http://127.0.0.1:${port}/v1, max_connections: 64, timeouts: { connect_ms: 1000 } }`;
  return `# Written by bench/routing.ts for one run.
server:
  host: 127.0.0.1
  port: 0
  log_level: error
providers:
  first: ${provider(firstPort)}
  second: ${provider(upstreamPort)}
  third: ${provider(upstreamPort)}
tiers:
  default: {}
models:
  - namespace: bench/routed
    name: Bench routed
    type: text
    apis: [chat]
    routes:
      - { provider: first, model: bench/routed }
      - { provider: second, model: bench/routed }
      - { provider: third, model: bench/routed }
    routing:
      strategy: priority
      breaker: { consecutive_failures: ${CONSECUTIVE_FAILURES}, cooldown_seconds: 3600 }
`;
}

/** A dead upstream: accepts, drops at once, counts. */
async function startDead(): Promise<{ server: Server; port: number; connections: () => number }> {
  let connections = 0;
  const server = createServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port, connections: () => connections };
}

async function post(origin: string, spec: RequestSpec): Promise<number> {
  const pool = new Pool(origin, { connections: 1 });
  try {
    const res = await pool.request({
      method: 'POST',
      path: spec.path,
      headers: spec.headers,
      body: spec.body,
    });
    await res.body.text();
    return res.statusCode;
  } finally {
    await pool.close();
  }
}

export async function runRoutingLane(options: RoutingLaneOptions): Promise<RoutingLaneResult> {
  const { log, root } = options;
  const requests = envInt('BENCH_ROUTING_REQUESTS', options.quick ? 500 : 2_000, 10);
  const errors: string[] = [];
  const tempDir = mkdtempSync(join(tmpdir(), 'gantry-bench-routing-'));
  const started: Child[] = [];
  const pools: Pool[] = [];
  const dead = await startDead();
  try {
    const upstream = await startChild({
      name: 'upstream',
      args: ['--import', 'tsx', 'bench/upstream.ts', '--chunks', String(options.chunks)],
      cwd: root,
      ready: 'ipc',
    });
    started.push(upstream);
    const { GANTRY_CONFIG: _ignored, REDIS_URL: _ignoredToo, ...inherited } = process.env;
    const startOne = async (name: LaneTarget, firstPort: number): Promise<Child> => {
      const config = join(tempDir, `${name}.yaml`);
      writeFileSync(config, gantryYaml(upstream.port, firstPort));
      const child = await startGantryChild({
        name,
        cwd: root,
        nodeFlags: [...gantryNodeFlags(join(root, 'package.json')), '--import', ORPHAN_GUARD],
        bin: options.gantryBin,
        config,
        env: inherited,
        dataDir: join(tempDir, `data-${name}`),
        apiKey: API_KEY,
      });
      started.push(child);
      return child;
    };
    const healthy = await startOne('gantry-healthy', upstream.port);
    const oneDead = await startOne('gantry-one-dead', dead.port);
    const targets: Array<{ name: LaneTarget; origin: string }> = [
      { name: 'gantry-healthy', origin: `http://127.0.0.1:${healthy.port}` },
      { name: 'gantry-one-dead', origin: `http://127.0.0.1:${oneDead.port}` },
    ];

    // Open the dead deployment's circuit: each of these requests tries it, fails over, and is answered.
    for (let i = 0; i < CONSECUTIVE_FAILURES; i++) {
      const status = await post(targets[1]?.origin as string, chatSpec(false));
      if (status !== 200) throw new Error(`gantry-one-dead: HTTP ${status} while opening the circuit`);
    }
    const opened = dead.connections();
    if (opened < CONSECUTIVE_FAILURES)
      errors.push(`the dead upstream saw ${opened} connections while opening`);
    log(`routing lane: circuit of the dead deployment open after ${opened} connection(s); measuring`);

    const phases = [
      { id: 'json-c1', stream: false },
      { id: 'stream-c1', stream: true },
    ];
    const runs = new Map<string, Map<LaneTarget, PhaseResult[]>>();
    for (let round = 0; round < options.rounds; round++) {
      for (const phase of phases) {
        const order = round % 2 === 0 ? targets : [...targets].reverse();
        for (const t of order) {
          const pool = createDispatcher(t.origin, 1);
          pools.push(pool);
          const plan = { kind: 'count' as const, concurrency: 1, warmup: 100, requests };
          const result = await drive(pool, chatSpec(phase.stream), plan);
          if (result.errors > 0) {
            errors.push(`${t.name} ${phase.id}: ${result.errors} errors (${result.errorSamples.join('; ')})`);
          }
          const byTarget = runs.get(phase.id) ?? new Map<LaneTarget, PhaseResult[]>();
          runs.set(phase.id, byTarget);
          byTarget.set(t.name, [...(byTarget.get(t.name) ?? []), result]);
        }
      }
      log(`routing lane: round ${round + 1}/${options.rounds} done`);
    }
    const whileMeasuring = dead.connections() - opened;
    return report(runs, whileMeasuring, errors);
  } finally {
    await Promise.all(pools.map((p) => p.destroy().catch(() => undefined)));
    for (const child of started.reverse()) await stopChild(child).catch(() => undefined);
    await new Promise<void>((resolve) => dead.server.close(() => resolve()));
    rmSync(tempDir, { recursive: true, force: true });
  }
}

function report(
  runs: Map<string, Map<LaneTarget, PhaseResult[]>>,
  deadConnections: number,
  errors: string[],
): RoutingLaneResult {
  const pooled = (phase: string, target: LaneTarget, field: 'latency' | 'ttfc') =>
    summarize((runs.get(phase)?.get(target) ?? []).flatMap((r) => Array.from(r[field])));
  const rows: string[][] = [];
  const json: Record<string, unknown> = {};
  for (const [phase, field] of [
    ['json-c1', 'latency'],
    ['stream-c1', 'ttfc'],
  ] as const) {
    const h = pooled(phase, 'gantry-healthy', field);
    const d = pooled(phase, 'gantry-one-dead', field);
    const added = d.p50 - h.p50;
    json[phase] = {
      healthy: { p50: round3(h.p50), p99: round3(h.p99) },
      oneDead: { p50: round3(d.p50), p99: round3(d.p99) },
      addedP50: round3(added),
    };
    rows.push([
      phase === 'json-c1' ? 'JSON c=1, latency' : 'stream c=1, first content',
      h.p50.toFixed(3),
      d.p50.toFixed(3),
      `${added >= 0 ? '+' : ''}${added.toFixed(3)}`,
      h.p99.toFixed(3),
      d.p99.toFixed(3),
    ]);
  }
  const jsonAdded = (json['json-c1'] as { addedP50: number }).addedP50;
  const verdicts = {
    addedP50: { value: jsonAdded, target: ADDED_P50_TARGET_MS, pass: jsonAdded <= ADDED_P50_TARGET_MS },
    deadConnections: { value: deadConnections, target: 0, pass: deadConnections === 0 },
  };
  json.deadConnectionsWhileMeasuring = deadConnections;
  json.verdicts = verdicts;
  const text = [
    table(
      'Routing: one dead deployment of three, circuit open (ms)',
      ['phase', 'healthy p50', 'one-dead p50', 'added p50', 'healthy p99', 'one-dead p99'],
      rows,
    ),
    '',
    `${verdicts.addedP50.pass ? 'PASS' : 'MISS'}  added p50 (JSON c=1) ${jsonAdded.toFixed(3)} ms <= ${ADDED_P50_TARGET_MS} ms`,
    `${verdicts.deadConnections.pass ? 'PASS' : 'MISS'}  connections to the dead upstream while measuring: ${deadConnections} (target 0)`,
    '',
  ].join('\n');
  return { text, json, errors };
}
