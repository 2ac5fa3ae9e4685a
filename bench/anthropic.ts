/**
 * The Anthropic-translation lane of `npm run bench` (BENCH_PHASES=anthropic): what Gantry's translation
 * to and from the Anthropic Messages API costs, beside plain pass-through to an OpenAI-compatible
 * upstream, measured the same way in the same run.
 *
 * Its own children: the fake OpenAI-compatible upstream (bench/upstream.ts), a fake Anthropic upstream
 * (bench/anthropic-upstream.ts, Anthropic's exact JSON and SSE) and one compiled Gantry serving
 * `bench/pass` (pass-through to the first) and `bench/claude` (translated to the second). Four targets,
 * in rotating order round by round: `direct-openai` and `direct-anthropic` (each fake called in its own
 * format), `gantry-pass` and `gantry-anthropic` (the same chat completion request through Gantry).
 *
 * Requests carry a function tool (`tools`), so the Anthropic answer is a text block plus a tool_use
 * block: JSON, and a stream of BENCH_CHUNKS deltas (three quarters text_delta, a quarter
 * input_json_delta). A Gantry that refuses `tools` on Anthropic (a 400 naming it) is measured without
 * them, and the lane says so. Figures: latency at c=1 (p50/p99, added over the target's own upstream),
 * streams at c=1 (time to first content, whole stream), throughput at c=32, and Gantry's CPU per request.
 * "translation adds" is gantry-anthropic's added time (or CPU) minus gantry-pass's.
 *
 * Settings: BENCH_ANTHROPIC_REQUESTS (c=1 requests per target and round, 1000; quick 300),
 * BENCH_ANTHROPIC_MS (c=32 window per target and round, 1500; quick 800), BENCH_ANTHROPIC_TOOLS=0
 * (no tools), and run.ts's BENCH_ROUNDS, BENCH_CHUNKS, BENCH_GANTRY_BIN, --quick.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'undici';
import { type Child, ORPHAN_GUARD, readCpuMs, startChild, stopChild } from './lib/children.js';
import { envInt, gantryNodeFlags } from './lib/env.js';
import { startGantryChild } from './lib/gantry-child.js';
import { createDispatcher, drive, type PhaseResult, type Plan, type RequestSpec } from './lib/load.js';
import { round3, type Summary, summarize } from './lib/stats.js';
import { int0, table } from './lib/table.js';

export interface AnthropicLaneOptions {
  root: string;
  quick: boolean;
  rounds: number;
  chunks: number;
  gantryBin: string;
  log: (message: string) => void;
}

export interface AnthropicLaneResult {
  /** The lane's tables, ready to print. */
  text: string;
  json: Record<string, unknown>;
  errors: string[];
}

type LaneTarget = 'direct-openai' | 'gantry-pass' | 'direct-anthropic' | 'gantry-anthropic';

interface Target {
  name: LaneTarget;
  origin: string;
  /** The Gantry process (CPU per request), for the two Gantry targets. */
  gantry?: Child;
  json: RequestSpec;
  stream: RequestSpec;
  pools: Map<number, Pool>;
}

interface LanePhase {
  id: string;
  stream: boolean;
  plan: Plan;
}

interface Measured {
  result: PhaseResult;
  cpuMs: number;
}

const API_KEY = `gty_bench_${randomBytes(24).toString('base64url')}`;
const ANTHROPIC_KEY = `sk-ant-bench-${randomBytes(12).toString('hex')}`;
const SYSTEM = 'You are a concise assistant. Answer in one short paragraph.';
const USER = 'What is the weather in San Francisco for the next three days? Use the tool.';
const TOOL = {
  name: 'get_weather',
  description: 'Get the weather forecast for a location',
  parameters: {
    type: 'object',
    properties: {
      location: { type: 'string', description: 'City and state, e.g. San Francisco, CA' },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      days: { type: 'integer' },
    },
    required: ['location'],
  },
};
const ANTHROPIC_END = Buffer.from('event: message_stop\ndata: {"type":"message_stop"}\n\n');
const ANTHROPIC_CONTENT = Buffer.from('"type":"text_delta"');

function chatSpec(model: string, stream: boolean, tools: boolean): RequestSpec {
  const body = {
    model,
    messages: [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: USER },
    ],
    temperature: 0.7,
    max_tokens: 256,
    ...(tools ? { tools: [{ type: 'function', function: TOOL }] } : {}),
    ...(stream ? { stream: true } : {}),
  };
  return {
    path: '/v1/chat/completions',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json',
      authorization: `Bearer ${API_KEY}`,
      'user-agent': 'gantry-bench/0.1',
    },
    body: Buffer.from(JSON.stringify(body)),
    stream,
  };
}

/** The Anthropic request Gantry's translation of chatSpec amounts to, sent to the fake directly. */
function messagesSpec(stream: boolean, tools: boolean): RequestSpec {
  const body = {
    model: 'claude-bench',
    max_tokens: 256,
    system: SYSTEM,
    messages: [{ role: 'user', content: USER }],
    temperature: 0.7,
    ...(tools
      ? {
          tools: [{ name: TOOL.name, description: TOOL.description, input_schema: TOOL.parameters }],
        }
      : {}),
    ...(stream ? { stream: true } : {}),
  };
  return {
    path: '/v1/messages',
    headers: {
      'content-type': 'application/json',
      'x-api-key': ANTHROPIC_KEY,
      'anthropic-version': '2023-06-01',
      'user-agent': 'gantry-bench/0.1',
    },
    body: Buffer.from(JSON.stringify(body)),
    stream,
    contentMarker: ANTHROPIC_CONTENT,
    endMarker: ANTHROPIC_END,
  };
}

function gantryYaml(openaiPort: number, anthropicPort: number): string {
  return `# Written by bench/anthropic.ts for one run.
server:
  host: 127.0.0.1
  port: 0
  log_level: warn
providers:
  bench-openai:
    kind: openai
    base_url: http://127.0.0.1:${openaiPort}/v1
    max_connections: 128
  bench-anthropic:
    kind: anthropic
    base_url: http://127.0.0.1:${anthropicPort}
    api_key_env: BENCH_ANTHROPIC_KEY
    max_connections: 128
tiers:
  default: {}
models:
  - namespace: bench/pass
    name: Bench pass-through
    type: text
    apis: [chat]
    routes: [{ provider: bench-openai, model: bench/pass }]
  - namespace: bench/claude
    name: Bench Anthropic translation
    type: text
    apis: [chat]
    routes: [{ provider: bench-anthropic, model: claude-bench }]
`;
}

async function post(pool: Pool, spec: RequestSpec): Promise<{ status: number; text: string }> {
  const res = await pool.request({ method: 'POST', path: spec.path, headers: spec.headers, body: spec.body });
  return { status: res.statusCode, text: await res.body.text() };
}

/**
 * One JSON and one streamed request per target, checked, so no target wins by failing. Through Gantry
 * to Anthropic with tools: a tool call in the answer and `finish_reason: tool_calls` in both.
 */
async function sanityCheck(target: Target, tools: boolean): Promise<void> {
  const pool = new Pool(target.origin, { connections: 1 });
  try {
    const j = await post(pool, target.json);
    if (j.status !== 200) throw new Error(`${target.name}: HTTP ${j.status}: ${j.text.slice(0, 300)}`);
    const s = await post(pool, target.stream);
    if (s.status !== 200) throw new Error(`${target.name}: stream HTTP ${s.status}: ${s.text.slice(0, 300)}`);
    const end = target.stream.endMarker ?? Buffer.from('data: [DONE]\n\n');
    if (!s.text.endsWith(end.toString())) throw new Error(`${target.name}: stream does not end properly`);
    if (target.name !== 'gantry-anthropic' || !tools) return;
    const body = JSON.parse(j.text) as {
      choices?: Array<{ finish_reason?: string; message?: { tool_calls?: unknown[] } }>;
    };
    const choice = body.choices?.[0];
    if (choice?.finish_reason !== 'tool_calls' || (choice.message?.tool_calls?.length ?? 0) !== 1)
      throw new Error(`${target.name}: no tool call in the JSON answer: ${j.text.slice(0, 300)}`);
    if (!s.text.includes('"tool_calls"') || !s.text.includes('"finish_reason":"tool_calls"'))
      throw new Error(`${target.name}: no tool call in the stream`);
  } finally {
    await pool.close();
  }
}

/** Does this Gantry refuse `tools` on Anthropic (a version before tool translation)? */
async function refusesTools(origin: string): Promise<boolean> {
  const pool = new Pool(origin, { connections: 1 });
  try {
    const res = await post(pool, chatSpec('bench/claude', false, true));
    return res.status === 400 && res.text.includes('"param":"tools"');
  } finally {
    await pool.close();
  }
}

export async function runAnthropicLane(options: AnthropicLaneOptions): Promise<AnthropicLaneResult> {
  const { log, root } = options;
  const requests = envInt('BENCH_ANTHROPIC_REQUESTS', options.quick ? 300 : 1_000, 10);
  const windowMs = envInt('BENCH_ANTHROPIC_MS', options.quick ? 800 : 1_500, 100, 600_000);
  const errors: string[] = [];
  const tempDir = mkdtempSync(join(tmpdir(), 'gantry-bench-anthropic-'));
  const started: Child[] = [];
  const pools: Pool[] = [];
  try {
    const chunkArgs = ['--chunks', String(options.chunks)];
    const [openai, anthropic] = await Promise.all([
      startChild({
        name: 'upstream',
        args: ['--import', 'tsx', 'bench/upstream.ts', ...chunkArgs],
        cwd: root,
        ready: 'ipc',
      }),
      startChild({
        name: 'anthropic-upstream',
        args: ['--import', 'tsx', 'bench/anthropic-upstream.ts', ...chunkArgs],
        cwd: root,
        ready: 'ipc',
      }),
    ]);
    started.push(openai, anthropic);
    const config = join(tempDir, 'gantry.yaml');
    writeFileSync(config, gantryYaml(openai.port, anthropic.port));
    const { GANTRY_CONFIG: _ignored, REDIS_URL: _ignoredToo, ...inherited } = process.env;
    const gantry = await startGantryChild({
      name: 'gantry-anthropic-lane',
      cwd: root,
      nodeFlags: [...gantryNodeFlags(join(root, 'package.json')), '--import', ORPHAN_GUARD],
      bin: options.gantryBin,
      config,
      env: { ...inherited, BENCH_ANTHROPIC_KEY: ANTHROPIC_KEY },
      dataDir: join(tempDir, 'data'),
      apiKey: API_KEY,
    });
    started.push(gantry);
    const gantryOrigin = `http://127.0.0.1:${gantry.port}`;

    let tools = process.env.BENCH_ANTHROPIC_TOOLS !== '0';
    let toolsNote = tools ? 'with a tool call' : 'text only (BENCH_ANTHROPIC_TOOLS=0)';
    if (tools && (await refusesTools(gantryOrigin))) {
      tools = false;
      toolsNote = 'text only: this Gantry refuses `tools` on Anthropic';
      process.stdout.write(`\n!!!\n!!! anthropic lane: ${toolsNote}; measuring without tools\n!!!\n\n`);
    }
    const target = (name: LaneTarget, origin: string, json: RequestSpec, stream: RequestSpec): Target => ({
      name,
      origin,
      ...(name.startsWith('gantry') ? { gantry } : {}),
      json,
      stream,
      pools: new Map(),
    });
    const targets: Target[] = [
      target(
        'direct-openai',
        `http://127.0.0.1:${openai.port}`,
        chatSpec('bench/pass', false, tools),
        chatSpec('bench/pass', true, tools),
      ),
      target(
        'gantry-pass',
        gantryOrigin,
        chatSpec('bench/pass', false, tools),
        chatSpec('bench/pass', true, tools),
      ),
      target(
        'direct-anthropic',
        `http://127.0.0.1:${anthropic.port}`,
        messagesSpec(false, tools),
        messagesSpec(true, tools),
      ),
      target(
        'gantry-anthropic',
        gantryOrigin,
        chatSpec('bench/claude', false, tools),
        chatSpec('bench/claude', true, tools),
      ),
    ];
    for (const t of targets) await sanityCheck(t, tools);
    log(
      `anthropic lane: ${toolsNote}, ${options.chunks}-delta streams, ${options.rounds} round(s), gantry :${gantry.port}`,
    );

    const phases: LanePhase[] = [
      { id: 'json-c1', stream: false, plan: { kind: 'count', concurrency: 1, warmup: 100, requests } },
      {
        id: 'stream-c1',
        stream: true,
        plan: { kind: 'count', concurrency: 1, warmup: 50, requests: Math.ceil(requests / 2) },
      },
      {
        id: 'json-c32',
        stream: false,
        plan: { kind: 'time', concurrency: 32, warmupMs: 300, durationMs: windowMs },
      },
      {
        id: 'stream-c32',
        stream: true,
        plan: { kind: 'time', concurrency: 32, warmupMs: 300, durationMs: windowMs },
      },
    ];
    const runs = new Map<string, Map<LaneTarget, Measured[]>>();
    for (let round = 0; round < options.rounds; round++) {
      for (const phase of phases) {
        const order = targets.map((_, i) => targets[(i + round) % targets.length] as Target);
        for (const t of order) {
          let pool = t.pools.get(phase.plan.concurrency);
          if (!pool) {
            pool = createDispatcher(t.origin, phase.plan.concurrency);
            t.pools.set(phase.plan.concurrency, pool);
            pools.push(pool);
          }
          const cpu0 = t.gantry ? readCpuMs(t.gantry.pid) : 0;
          const result = await drive(pool, phase.stream ? t.stream : t.json, phase.plan);
          const cpuMs = t.gantry ? readCpuMs(t.gantry.pid) - cpu0 : 0;
          if (result.errors > 0) {
            errors.push(`${t.name} ${phase.id}: ${result.errors} errors (${result.errorSamples.join('; ')})`);
          }
          const byTarget = runs.get(phase.id) ?? new Map<LaneTarget, Measured[]>();
          runs.set(phase.id, byTarget);
          byTarget.set(t.name, [...(byTarget.get(t.name) ?? []), { result, cpuMs }]);
        }
      }
      log(`anthropic lane: round ${round + 1}/${options.rounds} done`);
    }
    return report(runs, phases, toolsNote, options.chunks, errors);
  } finally {
    await Promise.all(pools.map((p) => p.destroy().catch(() => undefined)));
    for (const child of started.reverse()) await stopChild(child).catch(() => undefined);
    rmSync(tempDir, { recursive: true, force: true });
  }
}

function pooled(measured: Measured[], field: 'latency' | 'ttfc'): Summary {
  const all = measured.flatMap((m) => Array.from(m.result[field]));
  return summarize(all);
}

function cpuPerRequestUs(measured: Measured[]): number {
  const cpu = measured.reduce((sum, m) => sum + m.cpuMs, 0);
  const count = measured.reduce((sum, m) => sum + m.result.completedAll, 0);
  return count === 0 ? Number.NaN : (cpu * 1000) / count;
}

function reqPerSecond(measured: Measured[]): number {
  const done = measured.reduce((sum, m) => sum + m.result.completed, 0);
  const ms = measured.reduce((sum, m) => sum + m.result.windowMs, 0);
  return ms === 0 ? Number.NaN : (done * 1000) / ms;
}

const ms = (n: number) => (Number.isFinite(n) ? n.toFixed(3) : 'n/a');
const signedMs = (n: number) => (Number.isFinite(n) ? `${n >= 0 ? '+' : ''}${n.toFixed(3)}` : 'n/a');

function report(
  runs: Map<string, Map<LaneTarget, Measured[]>>,
  phases: LanePhase[],
  toolsNote: string,
  chunks: number,
  errors: string[],
): AnthropicLaneResult {
  const out: string[] = [];
  const json: Record<string, unknown> = { tools: toolsNote, chunks, phases: {} };
  const directOf: Record<LaneTarget, LaneTarget> = {
    'direct-openai': 'direct-openai',
    'gantry-pass': 'direct-openai',
    'direct-anthropic': 'direct-anthropic',
    'gantry-anthropic': 'direct-anthropic',
  };
  const summary: Record<string, number> = {};
  for (const phase of phases) {
    const byTarget = runs.get(phase.id);
    if (!byTarget) continue;
    const rows: string[][] = [];
    const phaseJson: Record<string, unknown> = {};
    const added: Partial<Record<LaneTarget, number>> = {};
    const cpu: Partial<Record<LaneTarget, number>> = {};
    for (const [name, measured] of byTarget) {
      const lat = pooled(measured, 'latency');
      const direct = pooled(byTarget.get(directOf[name]) ?? [], 'latency');
      const ttfc = phase.stream ? pooled(measured, 'ttfc') : undefined;
      const isDirect = name.startsWith('direct');
      added[name] = lat.p50 - direct.p50;
      cpu[name] = cpuPerRequestUs(measured);
      const rps = reqPerSecond(measured);
      rows.push([
        name,
        ms(lat.p50),
        ms(lat.p99),
        isDirect ? '' : signedMs(lat.p50 - direct.p50),
        ttfc ? ms(ttfc.p50) : '',
        phase.plan.kind === 'time' ? int0(rps) : '',
        isDirect ? '' : int0(cpu[name] ?? Number.NaN),
      ]);
      phaseJson[name] = {
        p50: round3(lat.p50),
        p99: round3(lat.p99),
        addedP50: isDirect ? null : round3(lat.p50 - direct.p50),
        ttfcP50: ttfc ? round3(ttfc.p50) : null,
        reqPerS: phase.plan.kind === 'time' ? round3(rps) : null,
        cpuUsPerRequest: isDirect ? null : round3(cpu[name] ?? Number.NaN),
      };
    }
    const translationMs = (added['gantry-anthropic'] ?? Number.NaN) - (added['gantry-pass'] ?? Number.NaN);
    const translationCpu = (cpu['gantry-anthropic'] ?? Number.NaN) - (cpu['gantry-pass'] ?? Number.NaN);
    summary[`${phase.id} translation added p50 ms`] = round3(translationMs);
    summary[`${phase.id} translation CPU us/req`] = round3(translationCpu);
    phaseJson.translation = { addedP50Ms: round3(translationMs), cpuUsPerRequest: round3(translationCpu) };
    (json.phases as Record<string, unknown>)[phase.id] = phaseJson;
    out.push(
      table(
        `Anthropic translation vs pass-through: ${phase.id} (${toolsNote})`,
        ['target', 'p50 ms', 'p99 ms', 'added p50', 'first content p50', 'req/s', 'Gantry CPU µs/req'],
        [
          ...rows,
          [
            'translation adds',
            '',
            '',
            signedMs(translationMs),
            '',
            '',
            Number.isFinite(translationCpu)
              ? `${translationCpu >= 0 ? '+' : ''}${int0(translationCpu)}`
              : 'n/a',
          ],
        ],
      ),
    );
  }
  json.summary = summary;
  json.errors = errors;
  if (errors.length > 0) out.push(`\nWARNING (anthropic lane): requests failed:\n  ${errors.join('\n  ')}`);
  return { text: out.join('\n'), json, errors };
}
