/**
 * Shared setup of the real-client suites (test/e2e/clients/): one Gantry in front of every provider kind,
 * the fakes that stand behind it, a neutral way to script what each kind answers, and a `fetch` that
 * clients are given so every body and SSE event Gantry sends them is checked against OpenAI's schemas.
 *
 * Provider kinds and the API a client uses on each ("lanes"):
 * - pass-through: an OpenAI-compatible upstream (the fake) on chat completions, relayed as it is;
 * - bridged: the Responses API bridged by Gantry onto that upstream's chat completions;
 * - anthropic: the Anthropic Messages API (the fake), on chat and on the Responses bridge;
 * - local-chat: the built-in `gantry/local-chat`, on chat and on the Responses bridge;
 * - responses-pass-through: the Responses API passed through to the fake's own (plain-text tests only).
 *
 * The fakes answer what a test scripts (tool calls, then the final text; or a JSON object); the
 * local model decides for itself (README "The built-in local models"), so tests assert on what holds
 * for every kind: the tool's name, arguments that match its schema, a final text built from the tool's
 * result, an object that matches the schema. Where the kind is scripted the exact values are checked too.
 */
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { type FakeAnthropic, startFakeAnthropic } from './fake-anthropic.js';
import { type FakeOpenAI, startFakeOpenAI } from './fake-openai.js';
import { startGantry, type TestGantry } from './gantry.js';
import { assertOpenAISchema } from './openapi.js';
import { parseSse } from './sse-events.js';

export type KindName = 'pass-through' | 'bridged' | 'anthropic' | 'local-chat' | 'responses-pass-through';
export type Api = 'chat' | 'responses';

/** One provider kind reached through one API. */
export interface Lane {
  /** e.g. `anthropic on chat`: names the lane in test titles (short: vitest cuts long ones). */
  title: string;
  kind: KindName;
  api: Api;
  /** The model id clients ask Gantry for. */
  model: string;
  /** true where a fake answers as scripted (exact values can be asserted); false for local-chat. */
  scripted: boolean;
}

export const MODELS: Record<KindName, string> = {
  'pass-through': 'fake/pass-through',
  bridged: 'fake/bridged',
  anthropic: 'anthropic/claude',
  'local-chat': 'gantry/local-chat',
  'responses-pass-through': 'fake/responses',
};

/** Every kind on every API that applies to it (pass-through chat; Responses bridged onto chat). */
export const LANES: Lane[] = [
  lane('pass-through', 'chat'),
  lane('anthropic', 'chat'),
  lane('local-chat', 'chat'),
  lane('bridged', 'responses'),
  lane('anthropic', 'responses'),
  lane('local-chat', 'responses'),
];

/**
 * The Responses API passed through to an upstream that speaks it (`supports_responses: true`). Only in
 * the plain-text tests: the fake's own Responses API answers text, never function calls.
 */
export const RESPONSES_PASS_THROUGH: Lane = lane('responses-pass-through', 'responses');

/** The lanes of the plain-text baseline: every lane, and the Responses API passed through. */
export const PLAIN_LANES: Lane[] = [...LANES, RESPONSES_PASS_THROUGH];

export const CHAT_LANES = LANES.filter((l) => l.api === 'chat');
export const RESPONSES_LANES = LANES.filter((l) => l.api === 'responses');

function lane(kind: KindName, api: Api): Lane {
  return {
    title: `${kind} on ${api}`,
    kind,
    api,
    model: MODELS[kind],
    scripted: kind !== 'local-chat',
  };
}

const ANTHROPIC_KEY = 'sk-ant-clients-0123456789';

export interface ClientsRig {
  gantry: TestGantry;
  openai: FakeOpenAI;
  anthropic: FakeAnthropic;
  /** A fetch for clients: records every exchange with Gantry for `checkWire()`. */
  fetch: typeof fetch;
  /** Scripts the next answer of the lane's upstream: one call of tool `name` with `args`. No-op on local-chat. */
  scriptToolCall(lane: Lane, name: string, args: Record<string, unknown>): void;
  /** Scripts the next answer of the lane's upstream: several tool calls at once (parallel). No-op on local-chat. */
  scriptToolCalls(lane: Lane, calls: { name: string; args: Record<string, unknown> }[]): void;
  /**
   * Scripts the next answer of the lane's upstream: `reasoning` (OpenAI-compatible: reasoning_content;
   * Anthropic: the thinking block it sends when thinking is on), then the text `text`. No-op on local-chat.
   */
  scriptReasoning(lane: Lane, reasoning: string, text: string): void;
  /** Scripts the next answer of the lane's upstream: the text `text`. No-op on local-chat. */
  scriptText(lane: Lane, text: string): void;
  /**
   * Scripts a structured-output answer: `value` as JSON text (OpenAI-compatible upstreams), or, on
   * Anthropic, the forced tool called with `value` (Anthropic's documented way to get JSON).
   */
  scriptObject(lane: Lane, value: Record<string, unknown>): void;
  /** Validates what Gantry sent the clients since the last call, against OpenAI's OpenAPI schemas. */
  checkWire(): Promise<void>;
  close(): Promise<void>;
}

export async function startClientsRig(): Promise<ClientsRig> {
  const openai = await startFakeOpenAI();
  const anthropic = await startFakeAnthropic({ apiKey: ANTHROPIC_KEY });
  // The Anthropic model sets no defaults.max_tokens: the clients send no output limit, and Gantry must
  // fill one (README, "Output limit") for Anthropic to take the call.
  const gantry = await startGantry(
    `
providers:
  upstream:
    kind: openai
    base_url: ${openai.url}
    supports_responses: false
  upstream-responses:
    kind: openai
    base_url: ${openai.url}
    supports_responses: true
  claude:
    kind: anthropic
    base_url: ${anthropic.url}
    api_key_env: ANTHROPIC_KEY
  local: { kind: local }
tiers:
  default: {}
models:
  - namespace: ${MODELS['pass-through']}
    name: Pass-through chat
    type: text
    capabilities: [text-to-text, image-to-text]
    apis: [chat, responses]
    routes: [{ provider: upstream, model: fake-model }]
  - namespace: ${MODELS.bridged}
    name: Bridged Responses
    type: text
    capabilities: [text-to-text, image-to-text]
    apis: [chat, responses]
    routes: [{ provider: upstream, model: fake-model }]
  - namespace: ${MODELS['responses-pass-through']}
    name: Responses passed through
    type: text
    capabilities: [text-to-text, image-to-text]
    apis: [chat, responses]
    routes: [{ provider: upstream-responses, model: fake-model }]
  - namespace: ${MODELS.anthropic}
    name: Claude
    type: text
    capabilities: [text-to-text, image-to-text]
    apis: [chat, responses]
    routes: [{ provider: claude, model: claude-upstream }]
  - namespace: ${MODELS['local-chat']}
    name: Local chat
    type: text
    capabilities: [text-to-text, image-to-text]
    apis: [chat, responses]
    routes: [{ provider: local, model: local-chat }]
    defaults: { temperature: 0.7, top_p: 0.95, max_tokens: 8192 }
`,
    { ANTHROPIC_KEY },
  );

  const exchanges: Exchange[] = [];
  const recordingFetch: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    const url = input instanceof Request ? input.url : String(input);
    exchanges.push({
      path: new URL(url).pathname,
      status: res.status,
      contentType: res.headers.get('content-type') ?? '',
      // undefined when the body could not be read to its end (the client left early): nothing to check.
      text: res
        .clone()
        .text()
        .catch(() => undefined),
    });
    return res;
  };

  return {
    gantry,
    openai,
    anthropic,
    fetch: recordingFetch,
    scriptToolCall(l, name, args) {
      if (l.kind === 'anthropic') anthropic.enqueue({ toolCalls: [{ name, input: args }] });
      else if (l.scripted) openai.enqueue({ toolCall: { name, arguments: JSON.stringify(args) } });
    },
    scriptToolCalls(l, calls) {
      if (l.kind === 'anthropic') {
        anthropic.enqueue({ toolCalls: calls.map((c) => ({ name: c.name, input: c.args })) });
      } else if (l.scripted) {
        openai.enqueue({
          toolCalls: calls.map((c) => ({ name: c.name, arguments: JSON.stringify(c.args) })),
        });
      }
    },
    scriptReasoning(l, reasoning, text) {
      if (l.kind === 'anthropic') {
        anthropic.enqueue({ thinking: reasoning, reply: text });
      } else if (l.scripted) {
        openai.enqueue({ reasoning, reply: text });
      }
    },
    scriptText(l, text) {
      if (l.kind === 'anthropic') anthropic.enqueue({ reply: text });
      else if (l.scripted) openai.enqueue({ reply: text });
    },
    scriptObject(l, value) {
      if (l.kind === 'anthropic') anthropic.enqueue({ toolInput: value });
      else if (l.scripted) openai.enqueue({ reply: JSON.stringify(value) });
    },
    async checkWire() {
      const taken = exchanges.splice(0);
      for (const ex of taken) await checkExchange(ex);
    },
    async close() {
      await gantry.close();
      await openai.close();
      await anthropic.close();
    },
  };
}

/**
 * Starts the rig for a suite file and, after each test, resets the fakes and validates what Gantry sent.
 * Call at the top level of the file; use the returned getter inside tests.
 */
export function useClientsRig(): () => ClientsRig {
  let rig: ClientsRig | undefined;
  const get = (): ClientsRig => {
    if (!rig) throw new Error('the clients rig is not started (beforeAll)');
    return rig;
  };
  beforeAll(async () => {
    rig = await startClientsRig();
  });
  afterEach(async () => {
    if (!rig) return;
    rig.openai.reset();
    rig.anthropic.reset();
    await rig.checkWire();
  });
  afterAll(async () => {
    await rig?.close();
  });
  return get;
}

interface Exchange {
  path: string;
  status: number;
  contentType: string;
  text: Promise<string | undefined>;
}

/** The schema of a successful answer on each inference path, JSON and per SSE event. */
const SCHEMAS: Record<string, { json: string; event: string }> = {
  '/v1/chat/completions': {
    json: 'CreateChatCompletionResponse',
    event: 'CreateChatCompletionStreamResponse',
  },
  '/v1/responses': { json: 'Response', event: 'ResponseStreamEvent' },
};

/**
 * The routes that answer in OpenAI's format, errors included (`{"error": {message, type, param, code}}`).
 * /v1/models and the Predictions API answer errors in the REST envelope instead (README).
 */
const OPENAI_ERROR_ROUTE = /^\/v1\/(chat\/completions|responses|embeddings|completions|moderations)(\/|$)/;

async function checkExchange(ex: Exchange): Promise<void> {
  const text = await ex.text;
  if (text === undefined) return;
  if (ex.status !== 200) {
    if (!OPENAI_ERROR_ROUTE.test(ex.path)) return;
    expect(ex.contentType, `${ex.path} answered ${ex.status}`).toMatch(/^application\/json/);
    assertOpenAISchema('ErrorResponse', JSON.parse(text));
    return;
  }
  const schemas = SCHEMAS[ex.path];
  if (!schemas) return;
  if (!ex.contentType.startsWith('text/event-stream')) {
    assertOpenAISchema(schemas.json, JSON.parse(text));
    return;
  }
  const events = parseSse(text);
  expect(events.length).toBeGreaterThan(0);
  for (const event of events) {
    if (event.data === '[DONE]') continue;
    const data: unknown = JSON.parse(event.data);
    // A chat stream reports a failure as `data: {"error": {…}}` (OpenAI's error object, no event type);
    // Responses streams have their own `error` event, which ResponseStreamEvent covers.
    const chatError = ex.path === '/v1/chat/completions' && isObject(data) && 'error' in data;
    assertOpenAISchema(chatError ? 'ErrorResponse' : schemas.event, data);
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** A weather tool every suite offers: its schema, the arguments the fakes are scripted with, its result. */
export const WEATHER = {
  name: 'get_weather' as const,
  description: 'The current weather in a city',
  parameters: {
    type: 'object' as const,
    properties: { city: { type: 'string', description: 'The city name' } },
    required: ['city'],
    additionalProperties: false,
  },
  args: { city: 'Paris' },
  /** What the tool returns: distinctive, so the final answer can be seen to be built from it. */
  result: 'sunny-21C',
  /** What the scripted upstreams answer after the tool result. */
  finalText: 'It is sunny and 21 degrees in Paris.',
  prompt: 'What is the weather in Paris? Use get_weather.',
};

/** The object the structured-output tests ask for. */
export const PERSON = {
  name: 'person',
  value: { name: 'Ada Lovelace', age: 36 },
  prompt: 'Ada Lovelace was 36. Extract the person.',
};

/** The final text each lane must give after the weather tool ran. */
export function expectFinalWeatherText(l: Lane, text: string): void {
  if (l.scripted) expect(text).toBe(WEATHER.finalText);
  else expect(text).toContain(WEATHER.result);
}

/** The arguments each lane must produce for the weather tool. */
export function expectWeatherArgs(l: Lane, args: unknown): void {
  if (l.scripted) {
    expect(args).toEqual(WEATHER.args);
  } else {
    expect(args).toEqual({ city: expect.any(String) });
  }
}

/** The object each lane must produce for PERSON. */
export function expectPerson(l: Lane, value: unknown): void {
  if (l.scripted) expect(value).toEqual(PERSON.value);
  else expect(value).toEqual({ name: expect.any(String), age: expect.any(Number) });
}

/**
 * What the lane's upstream received during a weather tool loop: the tool definition on the first call,
 * and the tool's result (tied to the call) on the next. A scripted fake answers its tool call whatever it
 * was sent, so without this a Gantry that dropped `tools` or the result would still pass. local-chat
 * only calls a tool it was given, so its answer already proves it.
 */
export function expectUpstreamToolLoop(rig: ClientsRig, l: Lane): void {
  if (l.kind === 'anthropic') {
    const [first, second] = rig.anthropic.requests;
    expect(first?.body?.tools).toEqual([
      expect.objectContaining({
        name: WEATHER.name,
        input_schema: expect.objectContaining({
          properties: { city: expect.objectContaining({ type: 'string' }) },
        }),
      }),
    ]);
    const messages = (second?.body?.messages ?? []) as { role: string; content: unknown }[];
    const toolUse = messages
      .flatMap((m) => (m.role === 'assistant' && Array.isArray(m.content) ? m.content : []))
      .find((b: { type?: string }) => b.type === 'tool_use') as { id?: string; name?: string } | undefined;
    expect(toolUse?.name).toBe(WEATHER.name);
    const last = messages.at(-1);
    expect(last?.role).toBe('user');
    expect(last?.content).toEqual(
      expect.arrayContaining([expect.objectContaining({ type: 'tool_result', tool_use_id: toolUse?.id })]),
    );
    expect(JSON.stringify(last?.content)).toContain(WEATHER.result);
    return;
  }
  if (!l.scripted) return;
  const [first, second] = rig.openai.requests;
  expect(first?.body?.tools).toEqual([
    expect.objectContaining({
      type: 'function',
      function: expect.objectContaining({
        name: WEATHER.name,
        parameters: expect.objectContaining({ type: 'object' }),
      }),
    }),
  ]);
  // The call goes back to the upstream under the id it gave it (the fake's ids are `call_fake<n>`).
  const messages = (second?.body?.messages ?? []) as Record<string, unknown>[];
  const assistant = messages.find((m) => m.role === 'assistant');
  expect(assistant?.tool_calls).toEqual([
    expect.objectContaining({
      id: expect.stringMatching(/^call_fake\d+$/),
      type: 'function',
      function: { name: WEATHER.name, arguments: expect.any(String) },
    }),
  ]);
  const callId = (assistant?.tool_calls as { id: string }[] | undefined)?.[0]?.id;
  const toolMessage = messages.find((m) => m.role === 'tool');
  expect(toolMessage?.tool_call_id).toBe(callId);
  expect(JSON.stringify(toolMessage?.content)).toContain(WEATHER.result);
}

/**
 * What the lane's upstream received for a structured-output call: the schema, as `response_format`
 * json_schema (OpenAI-compatible), as a forced tool whose input_schema is the schema (Anthropic), or,
 * with `via: 'tool'` (a client's function-calling method), as a forced function tool.
 */
export function expectUpstreamSchema(
  rig: ClientsRig,
  l: Lane,
  via: 'response_format' | 'tool' = 'response_format',
): void {
  const personProperties = expect.objectContaining({
    name: expect.objectContaining({ type: 'string' }),
    age: expect.objectContaining({ type: expect.stringMatching(/^(number|integer)$/) }),
  });
  if (l.kind === 'anthropic') {
    const body = rig.anthropic.requests[0]?.body;
    expect(body?.tools).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ input_schema: expect.objectContaining({ properties: personProperties }) }),
      ]),
    );
    expect(body?.tool_choice).toEqual(expect.objectContaining({ type: 'tool' }));
    return;
  }
  if (!l.scripted) return;
  const body = rig.openai.requests[0]?.body;
  if (via === 'tool') {
    expect(body?.tools).toEqual([
      expect.objectContaining({
        function: expect.objectContaining({
          parameters: expect.objectContaining({ properties: personProperties }),
        }),
      }),
    ]);
    return;
  }
  expect(body?.response_format).toEqual({
    type: 'json_schema',
    json_schema: expect.objectContaining({
      schema: expect.objectContaining({ properties: personProperties }),
    }),
  });
}

/** A plain text exchange (no tools): what every kind takes today; the baseline of each lane. */
export const PLAIN = {
  prompt: 'Say hello to the gantry crane.',
  /** What the scripted upstreams answer. */
  reply: 'Hello, gantry crane! Nice to meet you.',
};

/** The text each lane must answer to PLAIN.prompt: the scripted reply, or local-chat's echo of the prompt. */
export function expectPlainText(l: Lane, text: string): void {
  if (l.scripted) expect(text).toBe(PLAIN.reply);
  else expect(text).toContain(PLAIN.prompt);
}

/** A second tool, for parallel calls: the prompt names both tools, so every kind calls both at once. */
export const CLOCK = {
  name: 'get_time' as const,
  description: 'The current local time in a time zone',
  parameters: {
    type: 'object' as const,
    properties: { timezone: { type: 'string', description: 'An IANA time zone' } },
    required: ['timezone'],
    additionalProperties: false,
  },
  args: { timezone: 'Europe/Paris' },
  result: 'time-14h05',
};

export const PARALLEL = {
  prompt: 'What is the weather in Paris and the time there? Use get_weather and get_time.',
  finalText: 'It is sunny and 21 degrees in Paris, and 14:05.',
  calls: [
    { name: WEATHER.name, args: WEATHER.args },
    { name: CLOCK.name, args: CLOCK.args },
  ],
};

/** The arguments each lane must produce for the clock tool. */
export function expectClockArgs(l: Lane, args: unknown): void {
  if (l.scripted) expect(args).toEqual(CLOCK.args);
  else expect(args).toEqual({ timezone: expect.any(String) });
}

/** The final text after both tools ran: the scripted one, or local-chat's, which quotes both results. */
export function expectFinalParallelText(l: Lane, text: string): void {
  if (l.scripted) {
    expect(text).toBe(PARALLEL.finalText);
  } else {
    expect(text).toContain(WEATHER.result);
    expect(text).toContain(CLOCK.result);
  }
}

/**
 * The upstream's second request after parallel calls: both calls on the assistant turn and both results,
 * each tied to its call (Anthropic: tool_result blocks in one user turn; chat: one tool message each).
 */
export function expectUpstreamParallelResults(rig: ClientsRig, l: Lane): void {
  if (l.kind === 'anthropic') {
    const messages = (rig.anthropic.requests[1]?.body?.messages ?? []) as {
      role: string;
      content: unknown;
    }[];
    const uses = messages
      .flatMap((m) => (m.role === 'assistant' && Array.isArray(m.content) ? m.content : []))
      .filter((b: { type?: string }) => b.type === 'tool_use') as { id: string; name: string }[];
    expect(uses.map((u) => u.name)).toEqual([WEATHER.name, CLOCK.name]);
    const results = (messages.at(-1)?.content ?? []) as { type: string; tool_use_id: string }[];
    expect(results.filter((b) => b.type === 'tool_result').map((b) => b.tool_use_id)).toEqual(
      uses.map((u) => u.id),
    );
    expect(JSON.stringify(results)).toContain(WEATHER.result);
    expect(JSON.stringify(results)).toContain(CLOCK.result);
    return;
  }
  if (!l.scripted) return;
  const messages = (rig.openai.requests[1]?.body?.messages ?? []) as Record<string, unknown>[];
  const calls = (messages.find((m) => m.role === 'assistant')?.tool_calls ?? []) as {
    id: string;
    function: { name: string };
  }[];
  expect(calls.map((c) => c.function.name)).toEqual([WEATHER.name, CLOCK.name]);
  const tools = messages.filter((m) => m.role === 'tool');
  expect(tools.map((m) => m.tool_call_id)).toEqual(calls.map((c) => c.id));
  expect(JSON.stringify(tools)).toContain(WEATHER.result);
  expect(JSON.stringify(tools)).toContain(CLOCK.result);
}

/** A user turn with an image: a 1x1 PNG as a data: URI (nothing is fetched). */
export const IMAGE = {
  prompt: 'What is in this picture?',
  mediaType: 'image/png',
  base64: 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==',
  get dataUrl(): string {
    return `data:${this.mediaType};base64,${this.base64}`;
  },
  /** What the scripted upstreams answer. */
  reply: 'A single pixel.',
};

/** The answer to IMAGE: the scripted reply, or local-chat's count of the images it received (one). */
export function expectImageReply(l: Lane, text: string): void {
  if (l.scripted) expect(text).toBe(IMAGE.reply);
  else expect(text).toContain('Images received: 1');
}

/** The image reached the upstream: an image_url part (OpenAI-compatible) or a base64 image block (Anthropic). */
export function expectUpstreamImage(rig: ClientsRig, l: Lane): void {
  if (l.kind === 'anthropic') {
    const messages = (rig.anthropic.requests[0]?.body?.messages ?? []) as { content: unknown }[];
    expect(messages.at(-1)?.content).toEqual(
      expect.arrayContaining([
        { type: 'image', source: { type: 'base64', media_type: IMAGE.mediaType, data: IMAGE.base64 } },
      ]),
    );
    return;
  }
  if (!l.scripted) return;
  const messages = (rig.openai.requests[0]?.body?.messages ?? []) as { content: unknown }[];
  expect(messages.at(-1)?.content).toEqual(
    expect.arrayContaining([
      expect.objectContaining({
        type: 'image_url',
        image_url: expect.objectContaining({ url: IMAGE.dataUrl }),
      }),
    ]),
  );
}

/**
 * The upstream API the lane's calls reached: Responses passed through stays on /v1/responses, bridged
 * Responses and chat go to /v1/chat/completions (OpenAI-compatible), Anthropic gets /v1/messages.
 */
export function expectUpstreamApi(rig: ClientsRig, l: Lane): void {
  if (l.kind === 'local-chat') return;
  const requests = l.kind === 'anthropic' ? rig.anthropic.requests : rig.openai.requests;
  const expected =
    l.kind === 'anthropic'
      ? '/v1/messages'
      : l.kind === 'responses-pass-through'
        ? '/v1/responses'
        : '/v1/chat/completions';
  expect(requests.length).toBeGreaterThan(0);
  expect(requests.map((r) => r.path)).toEqual(requests.map(() => expected));
}

/**
 * The tool_choice the lane's upstream received: a named function (`{type: 'function', function: {name}}`
 * on chat; Anthropic's `{type: 'tool', name}`), or `none` (Anthropic: `{type: 'none'}`, or no tools).
 */
export function expectUpstreamToolChoice(rig: ClientsRig, l: Lane, choice: { name: string } | 'none'): void {
  if (l.kind === 'anthropic') {
    const body = rig.anthropic.requests[0]?.body;
    if (choice === 'none') {
      if (body?.tools !== undefined) expect(body?.tool_choice).toEqual({ type: 'none' });
    } else {
      expect(body?.tool_choice).toEqual(expect.objectContaining({ type: 'tool', name: choice.name }));
    }
    return;
  }
  if (!l.scripted) return;
  const body = rig.openai.requests[0]?.body;
  expect(body?.tool_choice).toEqual(
    choice === 'none' ? 'none' : { type: 'function', function: { name: choice.name } },
  );
}

/**
 * A JSON-mode call reached the upstream as JSON mode: `response_format: {type: 'json_object'}`
 * (OpenAI-compatible), or a forced tool taking any object (Anthropic).
 */
export function expectUpstreamJsonMode(rig: ClientsRig, l: Lane): void {
  if (l.kind === 'anthropic') {
    const body = rig.anthropic.requests[0]?.body;
    expect(body?.tool_choice).toEqual(expect.objectContaining({ type: 'tool' }));
    expect(body?.tools).toEqual([
      expect.objectContaining({ input_schema: expect.objectContaining({ type: 'object' }) }),
    ]);
    return;
  }
  if (!l.scripted) return;
  expect(rig.openai.requests[0]?.body?.response_format).toEqual({ type: 'json_object' });
}

/** A call with a reasoning effort: what the scripted upstreams think and answer. */
export const REASONING = {
  prompt: 'Is a gantry crane a bridge? Think first.',
  thinking: 'A gantry crane runs on legs, so it is a kind of bridge on legs.',
  reply: 'Yes, a bridge on legs.',
};

/**
 * The reasoning a lane gives back: the scripted thinking, exactly; local-chat accepts the effort and
 * gives none (README "The built-in local models").
 */
export function expectReasoning(l: Lane, reasoning: string | undefined): void {
  if (l.scripted) expect(reasoning).toBe(REASONING.thinking);
  else expect(reasoning ?? '').toBe('');
}

/** The answer after reasoning: the scripted reply, or local-chat's echo of the prompt. */
export function expectReasoningReply(l: Lane, text: string): void {
  if (l.scripted) expect(text).toBe(REASONING.reply);
  else expect(text).toContain(REASONING.prompt);
}

/** The effort reached the upstream: `reasoning_effort` (chat), or Anthropic's thinking budget. */
export function expectUpstreamEffort(rig: ClientsRig, l: Lane, effort: string): void {
  if (l.kind === 'anthropic') {
    for (const r of rig.anthropic.requests) {
      expect(r.body?.thinking).toEqual({ type: 'enabled', budget_tokens: expect.any(Number) });
      const budget = (r.body?.thinking as { budget_tokens?: number } | undefined)?.budget_tokens ?? 0;
      expect(budget).toBeGreaterThanOrEqual(1024);
    }
    return;
  }
  if (!l.scripted || l.kind === 'responses-pass-through') return;
  for (const r of rig.openai.requests) expect(r.body?.reasoning_effort).toBe(effort);
}
