/**
 * Every text of a JSON completion is checked (README, "Safety" → "Chat completions" and "Responses"),
 * through a real Gantry and a fake OpenAI upstream scripted with whole JSON answers: a chat message's
 * custom tool call input, content given as parts, audio transcript and legacy function_call arguments; a
 * Response's custom_tool_call input and mcp_call arguments and output. Under `block` a flagged one
 * filters the choice (or the Response) and never reaches the client; under `annotate` its results are
 * reported. And a remote classifier failing closed under `annotate` keeps a Responses JSON answer, the
 * error in the completion's results. Every answer out is checked against OpenAI's schemas.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type FakeModeration, startFakeModeration } from '../helpers/fake-moderation.js';
import { type FakeOpenAI, type JsonObject, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

/** The violent test phrase is a credible threat: medium or high, over the default threshold either way. */
const AT_LEAST_MEDIUM = expect.stringMatching(/^(medium|high)$/);

const KEY = 'sk-upstream-coverage-0123456789';
const MOD_KEY = 'sk-moderation-coverage-7a1b2c3d';
const VIOLENT = 'I am going to kill you, I know where you live and I have a gun';
const CLEAN = 'Have a lovely day';

let up: FakeOpenAI;
let mod: FakeModeration;
let gantry: TestGantry;

beforeAll(async () => {
  up = await startFakeOpenAI({ apiKey: KEY });
  mod = await startFakeModeration({ openaiKey: MOD_KEY });
  const model = (namespace: string, provider: string, safety: string) => `
  - namespace: ${namespace}
    name: ${namespace}
    type: text
    apis: [chat, responses]
    routes: [{ provider: ${provider}, model: fake-model }]
    safety: ${safety}`;
  gantry = await startGantry(
    `
providers:
  chat: { kind: openai, base_url: ${up.url}, api_key_env: UP_KEY }
  native: { kind: openai, base_url: ${up.url}, api_key_env: UP_KEY, supports_responses: true }
safety:
  policies:
    mod-closed: { mode: annotate, classifier: closed }
  classifiers:
    closed: { kind: openai_moderations, url: ${mod.moderationsUrl}, api_key_env: MOD_KEY, timeout_ms: 2000, on_failure: closed }
models:${model('c/block', 'chat', 'block')}${model('c/annotate', 'chat', 'annotate')}${model(
      'r/block',
      'native',
      'block',
    )}${model('r/annotate', 'native', 'annotate')}${model('r/mod-closed', 'native', 'mod-closed')}${model(
      'b/mod-closed',
      'chat',
      'mod-closed',
    )}
`,
    { UP_KEY: KEY, MOD_KEY },
  );
});

afterAll(async () => {
  await gantry?.close();
  await up?.close();
  await mod?.close();
});

beforeEach(() => {
  up.reset();
  mod.reset();
});

/** POST to Gantry with fetch: the status and the body parsed. */
async function post(path: string, body: JsonObject): Promise<{ status: number; body: JsonObject }> {
  const res = await fetch(`${gantry.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as JsonObject };
}

// ---- chat completions ----

const CLEAN_CHOICE = {
  index: 1,
  message: { role: 'assistant', content: CLEAN, refusal: null },
  logprobs: null,
  finish_reason: 'stop',
};

/** An upstream chat completion whose first choice carries `message`, and a clean second one. */
function chatAnswer(message: JsonObject, finishReason: string): JsonObject {
  return {
    id: 'chatcmpl-coverage',
    object: 'chat.completion',
    created: 1_750_000_000,
    model: 'fake-model',
    choices: [
      { index: 0, message: { role: 'assistant', ...message }, logprobs: null, finish_reason: finishReason },
      CLEAN_CHOICE,
    ],
    usage: { prompt_tokens: 4, completion_tokens: 20, total_tokens: 24 },
  };
}

async function chat(model: string, answer: JsonObject): Promise<JsonObject> {
  up.enqueue({ json: answer });
  const res = await post('/chat/completions', { model, messages: [{ role: 'user', content: CLEAN }] });
  expect(res.status).toBe(200);
  assertOpenAISchema('CreateChatCompletionResponse', schemaView(res.body));
  return res.body;
}

/**
 * The answer as the schema sees it: content given as parts (the upstream's own shape, which OpenAI's
 * schema does not have and Gantry relays as it came) is read as null; everything else is checked as is.
 */
function schemaView(body: JsonObject): JsonObject {
  const choices = (body.choices as ChatChoice[]).map((choice) =>
    Array.isArray(choice.message.content)
      ? { ...choice, message: { ...choice.message, content: null } }
      : choice,
  );
  return { ...body, choices };
}

type ChatChoice = JsonObject & { message: JsonObject; content_filter_results: Record<string, JsonObject> };
const choiceOf = (body: JsonObject) => (body.choices as ChatChoice[])[0] as ChatChoice;

const customCall = (input: string) => ({
  id: 'call_custom1',
  type: 'custom',
  custom: { name: 'shell', input },
});

/** Messages whose only violent text is in a field the check once skipped. */
const CHAT_CASES: Array<[string, JsonObject, string]> = [
  [
    'a custom tool call input',
    { content: null, refusal: null, tool_calls: [customCall(VIOLENT)] },
    'tool_calls',
  ],
  ['content given as text parts', { content: [{ type: 'text', text: VIOLENT }], refusal: null }, 'stop'],
  [
    'the audio transcript',
    {
      content: null,
      refusal: null,
      audio: { id: 'audio_1', expires_at: 1_750_003_600, data: 'UklGRg==', transcript: VIOLENT },
    },
    'stop',
  ],
  [
    'legacy function_call arguments',
    {
      content: null,
      refusal: null,
      function_call: { name: 'say', arguments: JSON.stringify({ text: VIOLENT }) },
    },
    'function_call',
  ],
];

describe('chat completions, JSON: every text of the message is checked', () => {
  it.each(CHAT_CASES)(
    'block: %s filters its choice only and never reaches the client',
    async (_, message, finish) => {
      const body = await chat('c/block', chatAnswer(message, finish));
      expect(JSON.stringify(body)).not.toContain('kill');
      const choice = choiceOf(body);
      expect(choice.finish_reason).toBe('content_filter');
      expect(choice.logprobs).toBeNull();
      expect(choice.message).toEqual({ role: 'assistant', content: null, refusal: null });
      expect(choice.content_filter_results.violence).toEqual({ filtered: true, severity: AT_LEAST_MEDIUM });
      const { content_filter_results, ...other } = (body.choices as ChatChoice[])[1] as ChatChoice;
      expect(other).toEqual(CLEAN_CHOICE);
      expect(content_filter_results.violence).toEqual({ filtered: false, severity: 'safe' });
    },
  );

  it.each(CHAT_CASES)('annotate: %s is reported, the answer kept', async (_, message, finish) => {
    const body = await chat('c/annotate', chatAnswer(message, finish));
    const choice = choiceOf(body);
    expect(choice.finish_reason).toBe(finish);
    expect(JSON.stringify(choice.message)).toContain('kill');
    expect(choice.content_filter_results.violence).toEqual({ filtered: false, severity: AT_LEAST_MEDIUM });
  });
});

// ---- responses ----

/** An upstream Response (completed) with `output`. */
function responseAnswer(output: JsonObject[]): JsonObject {
  return {
    id: 'resp_coverage',
    object: 'response',
    created_at: 1_750_000_000,
    status: 'completed',
    background: false,
    completed_at: 1_750_000_001,
    error: null,
    incomplete_details: null,
    instructions: null,
    max_output_tokens: null,
    max_tool_calls: null,
    model: 'fake-model',
    output,
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    service_tier: 'default',
    store: true,
    temperature: 1,
    text: { format: { type: 'text' }, verbosity: 'medium' },
    tool_choice: 'auto',
    tools: [],
    top_logprobs: 0,
    top_p: 1,
    truncation: 'disabled',
    metadata: {},
    usage: {
      input_tokens: 4,
      input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      output_tokens: 16,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 20,
    },
  };
}

const customItem = (input: string): JsonObject => ({
  id: 'ctc_1',
  type: 'custom_tool_call',
  status: 'completed',
  call_id: 'call_1',
  name: 'shell',
  input,
});
const mcpItem = (args: string, output: string | null): JsonObject => ({
  id: 'mcp_1',
  type: 'mcp_call',
  status: 'completed',
  server_label: 'files',
  name: 'write',
  arguments: args,
  output,
  error: null,
  approval_request_id: null,
});

async function respond(model: string, output: JsonObject[]): Promise<JsonObject> {
  up.enqueue({ json: responseAnswer(output) });
  const res = await post('/responses', { model, input: CLEAN });
  expect(res.status).toBe(200);
  assertOpenAISchema('Response', res.body);
  return res.body;
}

type Entry = JsonObject & { blocked: boolean; content_filter_results: Record<string, JsonObject> };
const completionEntry = (body: JsonObject) => (body.content_filters as Entry[])[1] as Entry;

const RESPONSE_CASES: Array<[string, JsonObject, number]> = [
  ['custom_tool_call input', customItem(VIOLENT), VIOLENT.length],
  [
    'mcp_call arguments',
    mcpItem(JSON.stringify({ text: VIOLENT }), null),
    JSON.stringify({ text: VIOLENT }).length,
  ],
  [
    'mcp_call output',
    mcpItem('{"path":"notes.txt"}', VIOLENT),
    '{"path":"notes.txt"}'.length + VIOLENT.length,
  ],
];

describe('Responses, JSON: every tool call text is checked', () => {
  it.each(RESPONSE_CASES)('block: %s makes the Response incomplete, the item dropped', async (_, item) => {
    const body = await respond('r/block', [item]);
    expect(JSON.stringify(body)).not.toContain('kill');
    expect(body.status).toBe('incomplete');
    expect(body.incomplete_details).toEqual({ reason: 'content_filter' });
    expect(body.output).toEqual([]);
    const entry = completionEntry(body);
    expect(entry.blocked).toBe(true);
    expect(entry.content_filter_results.violence).toEqual({ filtered: true, severity: AT_LEAST_MEDIUM });
  });

  it.each(RESPONSE_CASES)('annotate: %s is reported, the item kept', async (_, item, length) => {
    const body = await respond('r/annotate', [item]);
    expect(body.status).toBe('completed');
    expect(body.output).toEqual([item]);
    const entry = completionEntry(body);
    expect(entry.blocked).toBe(false);
    expect(entry.content_filter_results.violence).toEqual({ filtered: false, severity: AT_LEAST_MEDIUM });
    expect(entry.content_filter_offsets).toEqual({
      start_offset: 0,
      end_offset: length,
      check_offset: length,
    });
  });
});

describe('Responses, JSON, annotate with a classifier failing closed', () => {
  it('native: the prompt check failing is the 503; the completion check failing keeps the answer', async () => {
    // Before the upstream is called, closed still means closed.
    mod.setBehavior({ status: 500 });
    const refused = await post('/responses', { model: 'r/mod-closed', input: CLEAN });
    expect(refused.status).toBe(503);
    expect((refused.body.error as JsonObject).code).toBe('content_filter_unavailable');
    expect(up.requests).toHaveLength(0);
    mod.reset();

    // The prompt's check passes, the completion's fails: the answer was generated and billed.
    mod.enqueue({});
    mod.setBehavior({ status: 500 });
    const body = await respond('r/mod-closed', [customItem('ls -la /tmp')]);
    expect(body.status).toBe('completed');
    expect(body.output).toEqual([customItem('ls -la /tmp')]);
    const [prompt, completion] = body.content_filters as Entry[];
    expect(prompt?.content_filter_results.error).toBeUndefined();
    expect(completion?.blocked).toBe(false);
    expect(completion?.content_filter_results).toEqual({
      error: { code: 'content_filter_error', message: expect.any(String) },
    });
    expect(mod.requests).toHaveLength(2);
  });

  it('bridged, with the SDK: the answer is kept, the error in content_filters', async () => {
    mod.enqueue({});
    mod.setBehavior({ status: 500 });
    up.enqueue({ reply: CLEAN });
    const client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
    const response = await client.responses.create({ model: 'b/mod-closed', input: CLEAN });
    assertOpenAISchema('Response', response);
    expect(response.status).toBe('completed');
    expect(response.output_text).toBe(CLEAN);
    const [, completion] = (response as unknown as { content_filters: Entry[] }).content_filters;
    expect(completion?.content_filter_results).toEqual({
      error: { code: 'content_filter_error', message: expect.any(String) },
    });
  });
});
