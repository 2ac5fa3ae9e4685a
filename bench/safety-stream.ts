/**
 * In-process micro-benchmark of the safety layer's stream machinery (README, "Safety" → streams): the
 * 32-chunk answer bench/upstream.ts streams, fed as parsed SSE events (what the SSE decoder hands the
 * route) through safeChatStream under `annotate` and `block`, and the same answer as a Responses stream
 * (the bridge's events) through safeResponseEvents under `annotate`, against the same events passed
 * through untouched (policy `off`). The prompt's check is left out (settled once: a JSON answer pays for it
 * alike, and the safety lane times it); the completion check alone is timed beside, so "adds" minus
 * that is the machinery around the classifier.
 *
 * Prints CPU µs per stream (process.cpuUsage), median and range over the rounds. Versions compared
 * (--dist, several separated by commas) run in the same process, round by round in turn, so a busy
 * machine slows them alike.
 *
 * usage: node --import tsx bench/safety-stream.ts [--chunks 32] [--streams 5000] [--rounds 7]
 *        [--only NAME] [--dist DIR[,DIR…]]
 *   --dist DIR: the compiled modules under DIR (`dist` after npm run build, or a copy of another build),
 *   as Gantry runs them (with `node --max-semi-space-size=64`, as its start script); default: this
 *   checkout's sources.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type { JsonObject, SseEvent } from '../providers/types.js';
import type { ActiveSafety, SafetyCheck } from '../src/safety/engine.js';

const { values } = parseArgs({
  options: {
    chunks: { type: 'string', default: '32' },
    streams: { type: 'string', default: '5000' },
    rounds: { type: 'string', default: '7' },
    only: { type: 'string', default: '' },
    dist: { type: 'string', default: '' },
  },
});
const CHUNKS = Number(values.chunks);
const STREAMS = Number(values.streams);
const ROUNDS = Number(values.rounds);

/** bench/upstream.ts's REPLY, cut the same way. */
const REPLY =
  'Packets queue at the gate, one hand spreads them evenly, no server stands alone. ' +
  'Health checks hum softly, the slow node steps aside, traffic flows like rain.';
const WORDS = REPLY.match(/\s*\S+/g) ?? [REPLY];
const PIECES = Array.from({ length: CHUNKS }, (_, i) => WORDS[i % WORDS.length] as string);

/** bench/upstream.ts's frames (OpenAI's wire format, usage asked for, as Gantry always asks), parsed. */
function chatEvents(): SseEvent[] {
  const head =
    '{"id":"chatcmpl-Bx0000001Q7vKf3nT2mYpLr","object":"chat.completion.chunk","created":1764000000,' +
    '"model":"bench/annotate","service_tier":"default","system_fingerprint":"fp_b376dfbbd5","choices":';
  const choice = (delta: string, finish: string) => ({
    data: `${head}[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}],"usage":null}`,
  });
  const out = [choice('{"role":"assistant","content":"","refusal":null}', 'null')];
  for (const piece of PIECES) out.push(choice(`{"content":${JSON.stringify(piece)}}`, 'null'));
  out.push(choice('{}', '"stop"'));
  out.push({
    data:
      `${head}[],"usage":{"prompt_tokens":28,"completion_tokens":${CHUNKS},` +
      `"total_tokens":${28 + CHUNKS},"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},` +
      '"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,' +
      '"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}',
  });
  return out;
}

/** The same answer as a Responses stream, in the layout Gantry's bridge (responses/stream.ts) writes. */
function responsesEvents(): SseEvent[] {
  const text = PIECES.join('');
  const response = (status: string, output: unknown[]) => ({
    id: 'resp_1',
    object: 'response',
    created_at: 1764000000,
    status,
    model: 'bench/annotate',
    output,
  });
  const part = (t: string) => ({ type: 'output_text', annotations: [], logprobs: [], text: t });
  const item = (status: string, content: unknown[]) => ({
    id: 'msg_1',
    type: 'message',
    status,
    role: 'assistant',
    content,
  });
  const at = { item_id: 'msg_1', output_index: 0, content_index: 0 };
  const events: Array<Record<string, unknown>> = [
    { type: 'response.created', response: response('in_progress', []) },
    { type: 'response.in_progress', response: response('in_progress', []) },
    { type: 'response.output_item.added', output_index: 0, item: item('in_progress', []) },
    { type: 'response.content_part.added', ...at, part: part('') },
    ...PIECES.map((delta) => ({ type: 'response.output_text.delta', ...at, delta, logprobs: [] })),
    { type: 'response.output_text.done', ...at, text, logprobs: [] },
    { type: 'response.content_part.done', ...at, part: part(text) },
    { type: 'response.output_item.done', output_index: 0, item: item('completed', [part(text)]) },
    { type: 'response.completed', response: response('completed', [item('completed', [part(text)])]) },
  ];
  return events.map(({ type, ...rest }, i) => ({
    event: String(type),
    data: JSON.stringify({ type, sequence_number: i, ...rest }),
  }));
}

/** The SSE parser's shape: one async generator yielding the events of a read. */
async function* upstream(events: readonly SseEvent[]): AsyncGenerator<SseEvent> {
  for (const e of events) yield e;
}

const chat = chatEvents();
const responses = responsesEvents();
const PROMPT = [{ role: 'user', content: 'What should we plant first?' }];

type Runner = () => Promise<number>;

/** The runners of one version of the modules: `dir` a compiled tree, or '' for the sources. */
async function versionRunners(dir: string): Promise<Record<string, Runner>> {
  const from = (path: string) =>
    dir === '' ? `../src/${path}.js` : pathToFileURL(resolve(dir, 'src', `${path}.js`)).href;
  const { Metrics }: typeof import('../src/metrics.js') = await import(from('metrics'));
  const { chatSafetyContext, checkChatCompletion, checkChatPrompt }: typeof import('../src/safety/chat.js') =
    await import(from('safety/chat'));
  const { safeChatStream }: typeof import('../src/safety/chat-stream.js') = await import(
    from('safety/chat-stream')
  );
  const { newSafetyOutcome }: typeof import('../src/safety/engine.js') = await import(from('safety/engine'));
  const { offlineClassifier }: typeof import('../src/safety/offline/index.js') = await import(
    from('safety/offline/index')
  );
  const { PRESET_POLICIES }: typeof import('../src/safety/policy.js') = await import(from('safety/policy'));
  const { contentFilterEntry }: typeof import('../src/safety/responses.js') = await import(
    from('safety/responses')
  );
  const { safeResponseEvents }: typeof import('../src/safety/responses-stream.js') = await import(
    from('safety/responses-stream')
  );

  const metrics = new Metrics({ processMetrics: false });
  const classifier = offlineClassifier();
  const active = (mode: 'annotate' | 'block'): ActiveSafety => ({
    policy: PRESET_POLICIES[mode] as ActiveSafety['policy'],
    classifier,
    onFailure: 'open',
  });
  const context = (mode: 'annotate' | 'block') =>
    chatSafetyContext(active(mode), newSafetyOutcome(), metrics);
  // Settled once, as an offline prompt check is by the upstream's first chunk (a network away).
  const prompts = {
    annotate: checkChatPrompt(context('annotate'), PROMPT, 0),
    block: checkChatPrompt(context('block'), PROMPT, 0),
  };
  await Promise.all(Object.values(prompts));

  const stream = async (mode: 'annotate' | 'block'): Promise<number> => {
    let n = 0;
    for await (const e of safeChatStream(upstream(chat), {
      ctx: context(mode),
      windowChars: 400,
      prompt: prompts[mode] as Promise<SafetyCheck>,
      deliveredUsage: (): JsonObject => ({}),
      abort: () => undefined,
    })) {
      n += e.data.length;
    }
    return n;
  };
  const promptEntry = contentFilterEntry('prompt', await prompts.annotate, PROMPT[0]?.content.length ?? 0);
  const responsesStream = async (): Promise<number> => {
    let n = 0;
    for await (const e of safeResponseEvents(upstream(responses), {
      active: active('annotate'),
      outcome: newSafetyOutcome(),
      metrics,
      windowChars: 400,
      prompt: promptEntry,
      abort: () => undefined,
    })) {
      n += e.data.length;
    }
    return n;
  };
  return {
    'chat annotate': () => stream('annotate'),
    'responses annotate': responsesStream,
    'chat block': () => stream('block'),
    'completion check alone': async () =>
      (await checkChatCompletion(context('annotate'), PIECES.join(''))).flagged.length,
  };
}

const runners = new Map<string, Runner>();
runners.set('chat off', async () => {
  let n = 0;
  for await (const e of upstream(chat)) n += e.data.length;
  return n;
});
runners.set('responses off', async () => {
  let n = 0;
  for await (const e of upstream(responses)) n += e.data.length;
  return n;
});
for (const dir of values.dist.split(',')) {
  for (const [name, run] of Object.entries(await versionRunners(dir))) {
    runners.set(dir === '' ? name : `${dir}: ${name}`, run);
  }
}
for (const name of runners.keys()) {
  if (!name.endsWith(' off') && values.only !== '' && !name.includes(values.only)) runners.delete(name);
}

async function cpuPerStream(run: Runner): Promise<number> {
  const c0 = process.cpuUsage();
  for (let i = 0; i < STREAMS; i++) await run();
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / STREAMS;
}

for (const run of runners.values()) for (let i = 0; i < 2000; i++) await run();
const results = new Map<string, number[]>([...runners.keys()].map((n) => [n, []]));
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, run] of runners) results.get(name)?.push(await cpuPerStream(run));
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const offs = {
  chat: median(results.get('chat off') ?? []),
  responses: median(results.get('responses off') ?? []),
};
process.stdout.write(`${CHUNKS}-chunk streams, ${STREAMS} per round, ${ROUNDS} rounds: CPU µs per stream\n`);
for (const [name, xs] of results) {
  const m = median(xs);
  const range = `${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)}`;
  const api = /(chat|responses) (annotate|block)$/.exec(name)?.[1] as keyof typeof offs | undefined;
  const adds = api === undefined ? '' : `  adds ${(m - offs[api]).toFixed(1)}`;
  process.stdout.write(`  ${name.padEnd(40)} median ${m.toFixed(1).padStart(7)}  range ${range}${adds}\n`);
}
