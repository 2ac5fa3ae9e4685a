/**
 * Thinking and tools together on the Responses API bridged onto an Anthropic model, with the official
 * SDK: `reasoning.effort` turns thinking on, the model thinks and calls a tool, and the tool loop is
 * continued twice, by `previous_response_id` and by sending the output items back (the reasoning item
 * with its `encrypted_content`). The fake Anthropic refuses a tool-loop turn whose thinking block is
 * missing or whose signature is not the one it gave, so each continuation passing proves the signed
 * block made the round trip. Streamed and not; every body and event validated against OpenAI's schemas.
 */
import OpenAI from 'openai';
import type { ResponseStreamEvent } from 'openai/resources/responses/responses';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  anthropicFakeReply,
  anthropicFakeSignature,
  anthropicFakeThinking,
  type FakeAnthropic,
  type JsonObject,
  startFakeAnthropic,
} from '../helpers/fake-anthropic.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { WEATHER_TOOL } from '../helpers/tools.js';

const MODEL = 'anthropic/claude-thinking';
const PROMPT = 'Weather in Oslo?';
const CALL = { id: 'toolu_oslo', name: 'get_weather', input: { city: 'Oslo' } };
const RESULT = 'cold-and-clear';

let fake: FakeAnthropic;
let gantry: TestGantry;
let client: OpenAI;

beforeAll(async () => {
  fake = await startFakeAnthropic();
  gantry = await startGantry(`
providers:
  claude:
    kind: anthropic
    base_url: ${fake.url}
models:
  - namespace: ${MODEL}
    name: Claude thinking with tools
    type: text
    capabilities: [text-to-text]
    apis: [chat, responses]
    routes: [{ provider: claude, model: claude-upstream }]
`);
  client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
});
afterAll(async () => {
  await gantry?.close();
  await fake?.close();
});
beforeEach(() => fake.reset());

const thinkingParams = {
  model: MODEL,
  tools: [WEATHER_TOOL],
  reasoning: { effort: 'low' as const },
  max_output_tokens: 4000,
};

/** A Responses call, streamed or not: the final Response (from response.completed when streamed). */
async function create(
  stream: boolean,
  params: Omit<OpenAI.Responses.ResponseCreateParamsNonStreaming, 'stream'>,
): Promise<OpenAI.Responses.Response> {
  if (!stream) {
    const response = await client.responses.create({ ...params, stream: false });
    assertOpenAISchema('Response', response);
    return response;
  }
  const events: ResponseStreamEvent[] = [];
  for await (const event of await client.responses.create({ ...params, stream: true })) {
    assertOpenAISchema('ResponseStreamEvent', event);
    events.push(event);
  }
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_e, i) => i));
  const completed = events.at(-1);
  if (completed?.type !== 'response.completed') throw new Error(`the stream ended with ${completed?.type}`);
  // The reasoning streamed as text deltas joins into the reasoning item's text.
  const streamedThinking = events
    .filter((e) => e.type === 'response.reasoning_text.delta')
    .map((e) => (e as { delta: string }).delta)
    .join('');
  const item = completed.response.output.find((o) => o.type === 'reasoning');
  expect(streamedThinking).not.toBe('');
  expect(item?.content).toEqual([{ type: 'reasoning_text', text: streamedThinking }]);
  return completed.response;
}

/** The first turn: thinking, then the tool call, as a reasoning item (signed) and a function_call item. */
async function firstTurn(stream: boolean): Promise<{
  response: OpenAI.Responses.Response;
  reasoning: OpenAI.Responses.ResponseReasoningItem;
  call: OpenAI.Responses.ResponseFunctionToolCall;
}> {
  fake.enqueue({ toolCalls: [CALL] });
  const response = await create(stream, { ...thinkingParams, input: PROMPT });
  expect(response.output.map((item) => item.type)).toEqual(['reasoning', 'function_call']);
  const [reasoning, call] = response.output;
  if (reasoning?.type !== 'reasoning' || call?.type !== 'function_call') throw new Error('unexpected output');
  expect(reasoning.content).toEqual([{ type: 'reasoning_text', text: anthropicFakeThinking(PROMPT) }]);
  expect(typeof reasoning.encrypted_content).toBe('string');
  expect(call).toMatchObject({ call_id: CALL.id, name: CALL.name, arguments: JSON.stringify(CALL.input) });
  // Anthropic was asked to think (a budget below max_tokens) with the tool.
  const asked = fake.requests.at(-1)?.body as JsonObject;
  expect(asked.thinking).toMatchObject({ type: 'enabled' });
  expect((asked.tools as JsonObject[]).map((t) => t.name)).toEqual(['get_weather']);
  return { response, reasoning, call };
}

/** What Anthropic received for the continuation: the signed thinking block first in the tool turn. */
function expectThinkingSentBack(): void {
  const messages = (fake.requests.at(-1) as { body: JsonObject }).body.messages as JsonObject[];
  expect(messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user']);
  const thought = anthropicFakeThinking(PROMPT);
  expect(messages[1]?.content).toEqual([
    { type: 'thinking', thinking: thought, signature: anthropicFakeSignature(thought) },
    { type: 'tool_use', id: CALL.id, name: CALL.name, input: CALL.input },
  ]);
  expect(messages[2]?.content).toEqual([{ type: 'tool_result', tool_use_id: CALL.id, content: RESULT }]);
}

/** The final answer: the fake's reply to the tool result, after its thinking about it. */
function expectFinalAnswer(response: OpenAI.Responses.Response): void {
  expect(response.status).toBe('completed');
  expect(response.output.map((item) => item.type)).toEqual(['reasoning', 'message']);
  expect(response.output_text).toBe(anthropicFakeReply(RESULT));
}

describe.each([false, true])(
  'thinking and tools on the Responses bridge onto Anthropic (stream: %s)',
  (stream) => {
    it('continues the tool loop by previous_response_id with the signed thinking block', async () => {
      const { response, call } = await firstTurn(stream);
      const next = await create(stream, {
        ...thinkingParams,
        previous_response_id: response.id,
        input: [{ type: 'function_call_output', call_id: call.call_id, output: RESULT }],
      });
      expectThinkingSentBack();
      expectFinalAnswer(next);
    });

    it('continues the tool loop with the items sent back: the reasoning item carries the signature', async () => {
      const { reasoning, call } = await firstTurn(stream);
      const next = await create(stream, {
        ...thinkingParams,
        store: false,
        include: ['reasoning.encrypted_content'],
        input: [
          { role: 'user', content: PROMPT },
          reasoning,
          call,
          { type: 'function_call_output', call_id: call.call_id, output: RESULT },
        ],
      });
      expectThinkingSentBack();
      expectFinalAnswer(next);
    });

    it('round-trips a redacted thinking block and a call without arguments ("{}") in the items sent back', async () => {
      const redacted = 'EmwKAhgBEgy3va3pzix';
      const clock: OpenAI.Responses.FunctionTool = {
        type: 'function',
        name: 'get_time',
        description: 'The time now',
        parameters: { type: 'object', properties: {}, additionalProperties: false },
        strict: true,
      };
      fake.enqueue({
        redactedThinking: redacted,
        toolCalls: [{ id: 'toolu_clock', name: 'get_time', input: {} }],
      });
      const params = { ...thinkingParams, tools: [clock] };
      const first = await create(stream, { ...params, input: PROMPT });
      expect(first.output.map((item) => item.type)).toEqual(['reasoning', 'function_call']);
      const [reasoning, call] = first.output;
      if (reasoning?.type !== 'reasoning' || call?.type !== 'function_call')
        throw new Error('unexpected output');
      expect(call.arguments).toBe('{}');
      const next = await create(stream, {
        ...params,
        store: false,
        input: [
          { role: 'user', content: PROMPT },
          reasoning,
          call,
          { type: 'function_call_output', call_id: call.call_id, output: RESULT },
        ],
      });
      const messages = (fake.requests.at(-1) as { body: JsonObject }).body.messages as JsonObject[];
      const thought = anthropicFakeThinking(PROMPT);
      expect(messages[1]?.content).toEqual([
        { type: 'thinking', thinking: thought, signature: anthropicFakeSignature(thought) },
        { type: 'redacted_thinking', data: redacted },
        { type: 'tool_use', id: 'toolu_clock', name: 'get_time', input: {} },
      ]);
      expectFinalAnswer(next);
    });

    it('is refused by Anthropic when the reasoning item is left out: the thinking block is required', async () => {
      const { call } = await firstTurn(stream);
      const err = await create(stream, {
        ...thinkingParams,
        store: false,
        input: [
          { role: 'user', content: PROMPT },
          call,
          { type: 'function_call_output', call_id: call.call_id, output: RESULT },
        ],
      }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as Error).message).toMatch(/thinking/);
    });
  },
);
