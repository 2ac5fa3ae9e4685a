/**
 * The official `openai` SDK's helpers against Gantry with tools, through every provider kind: on chat,
 * the stream helper (`chat.completions.stream`: its argument events and `finalChatCompletion()`, which
 * must equal the non-streamed answer, for one call and for parallel calls) and `runTools` (the SDK's
 * own tool loop, plain and streamed); on the Responses API, `responses.create` with function tools
 * (parallel too) continued by `previous_response_id` and by the items themselves, and the
 * `responses.stream` helper; an image on both APIs; a reasoning effort and the reasoning it brings back
 * (reasoning_content on chat, a reasoning item on Responses); plain text (also on Responses passed through).
 * See test/helpers/clients.ts for the lanes and what each asserts.
 */
import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  CHAT_LANES,
  CLOCK,
  expectClockArgs,
  expectFinalParallelText,
  expectFinalWeatherText,
  expectImageReply,
  expectPlainText,
  expectReasoning,
  expectReasoningReply,
  expectUpstreamApi,
  expectUpstreamEffort,
  expectUpstreamImage,
  expectUpstreamParallelResults,
  expectUpstreamToolLoop,
  expectWeatherArgs,
  IMAGE,
  type Lane,
  PARALLEL,
  PLAIN,
  REASONING,
  RESPONSES_LANES,
  RESPONSES_PASS_THROUGH,
  useClientsRig,
  WEATHER,
} from '../../helpers/clients.js';

const rig = useClientsRig();
let client: OpenAI;
beforeAll(() => {
  client = new OpenAI({
    baseURL: rig().gantry.baseURL,
    apiKey: rig().gantry.key,
    maxRetries: 0,
    fetch: rig().fetch,
  });
});

const chatTools: OpenAI.ChatCompletionFunctionTool[] = [
  {
    type: 'function',
    function: { name: WEATHER.name, description: WEATHER.description, parameters: WEATHER.parameters },
  },
];
const parallelChatTools: OpenAI.ChatCompletionFunctionTool[] = [
  ...chatTools,
  {
    type: 'function',
    function: { name: CLOCK.name, description: CLOCK.description, parameters: CLOCK.parameters },
  },
];
const responsesTools: OpenAI.Responses.FunctionTool[] = [
  {
    type: 'function',
    name: WEATHER.name,
    description: WEATHER.description,
    parameters: WEATHER.parameters,
    strict: true,
  },
];
const parallelResponsesTools: OpenAI.Responses.FunctionTool[] = [
  ...responsesTools,
  {
    type: 'function',
    name: CLOCK.name,
    description: CLOCK.description,
    parameters: CLOCK.parameters,
    strict: true,
  },
];
const userMessage = { role: 'user' as const, content: WEATHER.prompt };

/** A chat message without what legitimately differs between two calls (the tool calls' ids). */
function comparable(message: OpenAI.ChatCompletionMessage | undefined) {
  return {
    role: message?.role,
    content: message?.content ?? null,
    tool_calls: message?.tool_calls?.map((call) => ({
      type: call.type,
      function: call.type === 'function' ? call.function : undefined,
      id: typeof call.id,
    })),
  };
}

function onlyFunctionCall(
  output: OpenAI.Responses.ResponseOutputItem[],
): OpenAI.Responses.ResponseFunctionToolCall {
  const calls = output.filter((item) => item.type === 'function_call');
  expect(calls).toHaveLength(1);
  const call = calls[0];
  if (call?.type !== 'function_call') throw new Error('no function_call output item');
  return call;
}

describe.each(CHAT_LANES)('openai SDK: $title', (lane: Lane) => {
  it('plain text: finalChatCompletion() of the stream helper equals the non-streamed answer', async () => {
    rig().scriptText(lane, PLAIN.reply);
    rig().scriptText(lane, PLAIN.reply);
    const messages = [{ role: 'user' as const, content: PLAIN.prompt }];
    const plain = await client.chat.completions.create({ model: lane.model, messages });
    expectPlainText(lane, plain.choices[0]?.message.content ?? '');
    const final = await client.chat.completions.stream({ model: lane.model, messages }).finalChatCompletion();
    expect(comparable(final.choices[0]?.message)).toEqual(comparable(plain.choices[0]?.message));
    expect(final.choices[0]?.finish_reason).toBe('stop');
    expectUpstreamApi(rig(), lane);
  });

  it('the stream helper reports the tool call and finalChatCompletion() equals the non-streamed answer', async () => {
    rig().scriptToolCall(lane, WEATHER.name, WEATHER.args);
    rig().scriptToolCall(lane, WEATHER.name, WEATHER.args);
    const plain = await client.chat.completions.create({
      model: lane.model,
      messages: [userMessage],
      tools: chatTools,
    });
    expect(plain.choices[0]?.finish_reason).toBe('tool_calls');

    const stream = client.chat.completions.stream({
      model: lane.model,
      messages: [userMessage],
      tools: chatTools,
    });
    const argumentsDone: { name: string; index: number; arguments: string }[] = [];
    stream.on('tool_calls.function.arguments.done', (event) => {
      argumentsDone.push({ name: event.name, index: event.index, arguments: event.arguments });
    });
    const final = await stream.finalChatCompletion();

    expect(final.choices).toHaveLength(1);
    expect(final.choices[0]?.finish_reason).toBe('tool_calls');
    expect(comparable(final.choices[0]?.message)).toEqual(comparable(plain.choices[0]?.message));
    const call = final.choices[0]?.message.tool_calls?.[0];
    if (call?.type !== 'function') throw new Error('no function tool call');
    expect(call.function.name).toBe(WEATHER.name);
    expectWeatherArgs(lane, JSON.parse(call.function.arguments));
    // The helper's event carries the arguments as its deltas added up: the same as the final message's.
    expect(argumentsDone).toEqual([{ name: WEATHER.name, index: 0, arguments: call.function.arguments }]);
  });

  it('an image_url part (data: URI) in the user message', async () => {
    rig().scriptText(lane, IMAGE.reply);
    const completion = await client.chat.completions.create({
      model: lane.model,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: IMAGE.prompt },
            { type: 'image_url', image_url: { url: IMAGE.dataUrl } },
          ],
        },
      ],
    });
    expectImageReply(lane, completion.choices[0]?.message.content ?? '');
    expectUpstreamImage(rig(), lane);
  });

  it('reasoning_effort: the reasoning comes back as reasoning_content, streamed and not', async () => {
    rig().scriptReasoning(lane, REASONING.thinking, REASONING.reply);
    rig().scriptReasoning(lane, REASONING.thinking, REASONING.reply);
    const messages = [{ role: 'user' as const, content: REASONING.prompt }];
    const plain = await client.chat.completions.create({
      model: lane.model,
      messages,
      reasoning_effort: 'low',
    });
    // reasoning_content is the field vLLM and DeepSeek use; the SDK's types do not know it.
    const message = plain.choices[0]?.message as
      | (OpenAI.ChatCompletionMessage & { reasoning_content?: string })
      | undefined;
    expectReasoning(lane, message?.reasoning_content);
    expectReasoningReply(lane, message?.content ?? '');

    const stream = await client.chat.completions.create({
      model: lane.model,
      messages,
      reasoning_effort: 'low',
      stream: true,
    });
    let reasoning = '';
    let text = '';
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as
        | { content?: string | null; reasoning_content?: string }
        | undefined;
      reasoning += delta?.reasoning_content ?? '';
      text += delta?.content ?? '';
    }
    expect(reasoning).toBe(message?.reasoning_content ?? '');
    expect(text).toBe(message?.content);
    expectUpstreamEffort(rig(), lane, 'low');
  });

  it('the stream helper with parallel tool calls gives the non-streamed message', async () => {
    rig().scriptToolCalls(lane, PARALLEL.calls);
    rig().scriptToolCalls(lane, PARALLEL.calls);
    const messages = [{ role: 'user' as const, content: PARALLEL.prompt }];
    const plain = await client.chat.completions.create({
      model: lane.model,
      messages,
      tools: parallelChatTools,
    });
    const stream = client.chat.completions.stream({ model: lane.model, messages, tools: parallelChatTools });
    const done: { name: string; index: number }[] = [];
    stream.on('tool_calls.function.arguments.done', (event) =>
      done.push({ name: event.name, index: event.index }),
    );
    const final = await stream.finalChatCompletion();

    expect(comparable(final.choices[0]?.message)).toEqual(comparable(plain.choices[0]?.message));
    const calls = (final.choices[0]?.message.tool_calls ?? []).flatMap((c) =>
      c.type === 'function' ? [c] : [],
    );
    expect(calls.map((c) => c.function.name)).toEqual([WEATHER.name, CLOCK.name]);
    expectWeatherArgs(lane, JSON.parse(calls[0]?.function.arguments ?? ''));
    expectClockArgs(lane, JSON.parse(calls[1]?.function.arguments ?? ''));
    expect(new Set(calls.map((c) => c.id)).size).toBe(2);
    expect(done).toEqual([
      { name: WEATHER.name, index: 0 },
      { name: CLOCK.name, index: 1 },
    ]);
  });

  it.each([false, true])(
    'runTools (stream: %s) runs the tool and ends with the final text',
    async (stream) => {
      rig().scriptToolCall(lane, WEATHER.name, WEATHER.args);
      rig().scriptText(lane, WEATHER.finalText);
      const executed: unknown[] = [];
      const tools = [
        {
          type: 'function' as const,
          function: {
            name: WEATHER.name,
            description: WEATHER.description,
            parameters: WEATHER.parameters,
            parse: (input: string) => JSON.parse(input) as { city: string },
            function: (args: { city: string }) => {
              executed.push(args);
              return WEATHER.result;
            },
          },
        },
      ];
      const runner = stream
        ? client.chat.completions.runTools({
            model: lane.model,
            messages: [userMessage],
            tools,
            stream: true,
          })
        : client.chat.completions.runTools({ model: lane.model, messages: [userMessage], tools });
      const content = await runner.finalContent();

      expect(executed).toHaveLength(1);
      expectWeatherArgs(lane, executed[0]);
      expectFinalWeatherText(lane, content ?? '');
      const roles = runner.messages.map((m) => m.role);
      expect(roles).toEqual(['user', 'assistant', 'tool', 'assistant']);
      expectUpstreamToolLoop(rig(), lane);
    },
  );
});

describe.each(RESPONSES_LANES)('openai SDK: $title', (lane: Lane) => {
  it('responses.create with tools: a function_call, then the answer after previous_response_id', async () => {
    rig().scriptToolCall(lane, WEATHER.name, WEATHER.args);
    rig().scriptText(lane, WEATHER.finalText);
    const first = await client.responses.create({
      model: lane.model,
      input: WEATHER.prompt,
      tools: responsesTools,
    });
    expect(first.status).toBe('completed');
    const call = onlyFunctionCall(first.output);
    expect(call.name).toBe(WEATHER.name);
    expect(call.call_id).toEqual(expect.any(String));
    expectWeatherArgs(lane, JSON.parse(call.arguments));

    const second = await client.responses.create({
      model: lane.model,
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: WEATHER.result }],
      tools: responsesTools,
    });
    expect(second.output.filter((item) => item.type === 'function_call')).toEqual([]);
    expectFinalWeatherText(lane, second.output_text);
    expectUpstreamToolLoop(rig(), lane);
  });

  it('responses.create with tools continues from the items themselves (store: false)', async () => {
    rig().scriptToolCall(lane, WEATHER.name, WEATHER.args);
    rig().scriptText(lane, WEATHER.finalText);
    const first = await client.responses.create({
      model: lane.model,
      input: [userMessage],
      tools: responsesTools,
      store: false,
    });
    const call = onlyFunctionCall(first.output);
    const second = await client.responses.create({
      model: lane.model,
      input: [
        userMessage,
        { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
        { type: 'function_call_output', call_id: call.call_id, output: WEATHER.result },
      ],
      tools: responsesTools,
      store: false,
    });
    expectFinalWeatherText(lane, second.output_text);
    expectUpstreamToolLoop(rig(), lane);
  });

  it('an input_image (data: URI) in the input', async () => {
    rig().scriptText(lane, IMAGE.reply);
    const response = await client.responses.create({
      model: lane.model,
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: IMAGE.prompt },
            { type: 'input_image', image_url: IMAGE.dataUrl, detail: 'auto' },
          ],
        },
      ],
    });
    expectImageReply(lane, response.output_text);
    expectUpstreamImage(rig(), lane);
  });

  it('reasoning.effort: a reasoning item before the answer, streamed and not', async () => {
    rig().scriptReasoning(lane, REASONING.thinking, REASONING.reply);
    rig().scriptReasoning(lane, REASONING.thinking, REASONING.reply);
    const plain = await client.responses.create({
      model: lane.model,
      input: REASONING.prompt,
      reasoning: { effort: 'low' },
    });
    const reasoningText = (response: OpenAI.Responses.Response): string | undefined => {
      const item = response.output.find((i) => i.type === 'reasoning');
      return item?.type === 'reasoning' ? (item.content ?? []).map((c) => c.text).join('') : undefined;
    };
    expectReasoning(lane, reasoningText(plain));
    expectReasoningReply(lane, plain.output_text);
    if (lane.scripted) expect(plain.output.map((i) => i.type)).toEqual(['reasoning', 'message']);

    const stream = client.responses.stream({
      model: lane.model,
      input: REASONING.prompt,
      reasoning: { effort: 'low' },
    });
    let deltas = '';
    for await (const event of stream)
      if (event.type === 'response.reasoning_text.delta') deltas += event.delta;
    const final = await stream.finalResponse();
    expect(reasoningText(final)).toBe(reasoningText(plain));
    expect(deltas).toBe(reasoningText(plain) ?? '');
    expect(final.output_text).toBe(plain.output_text);
    expectUpstreamEffort(rig(), lane, 'low');
  });

  it('responses.create with parallel function calls, answered together after previous_response_id', async () => {
    rig().scriptToolCalls(lane, PARALLEL.calls);
    rig().scriptText(lane, PARALLEL.finalText);
    const first = await client.responses.create({
      model: lane.model,
      input: PARALLEL.prompt,
      tools: parallelResponsesTools,
    });
    const calls = first.output.flatMap((item) => (item.type === 'function_call' ? [item] : []));
    expect(calls.map((c) => c.name)).toEqual([WEATHER.name, CLOCK.name]);
    expectWeatherArgs(lane, JSON.parse(calls[0]?.arguments ?? ''));
    expectClockArgs(lane, JSON.parse(calls[1]?.arguments ?? ''));
    expect(new Set(calls.map((c) => c.call_id)).size).toBe(2);

    const results = [WEATHER.result, CLOCK.result];
    const second = await client.responses.create({
      model: lane.model,
      previous_response_id: first.id,
      input: calls.map((c, i) => ({
        type: 'function_call_output' as const,
        call_id: c.call_id,
        output: results[i] ?? '',
      })),
      tools: parallelResponsesTools,
    });
    expectFinalParallelText(lane, second.output_text);
    expectUpstreamParallelResults(rig(), lane);
  });

  it('the responses.stream helper streams the function call, then the answer', async () => {
    rig().scriptToolCall(lane, WEATHER.name, WEATHER.args);
    rig().scriptText(lane, WEATHER.finalText);
    const stream = client.responses.stream({
      model: lane.model,
      input: WEATHER.prompt,
      tools: responsesTools,
    });
    let argumentDeltas = '';
    const argumentsDone: string[] = [];
    const added: string[] = [];
    for await (const event of stream) {
      if (event.type === 'response.output_item.added') added.push(event.item.type);
      if (event.type === 'response.function_call_arguments.delta') argumentDeltas += event.delta;
      if (event.type === 'response.function_call_arguments.done') argumentsDone.push(event.arguments);
    }
    const first = await stream.finalResponse();
    const call = onlyFunctionCall(first.output);
    expect(call.name).toBe(WEATHER.name);
    expectWeatherArgs(lane, JSON.parse(call.arguments));
    expect(added).toContain('function_call');
    expect(argumentDeltas).toBe(call.arguments);
    expect(argumentsDone).toEqual([call.arguments]);

    const next = client.responses.stream({
      model: lane.model,
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: WEATHER.result }],
      tools: responsesTools,
    });
    let text = '';
    for await (const event of next) if (event.type === 'response.output_text.delta') text += event.delta;
    const second = await next.finalResponse();
    expect(second.output_text).toBe(text);
    expectFinalWeatherText(lane, text);
    expectUpstreamToolLoop(rig(), lane);
  });
});

describe.each([...RESPONSES_LANES, RESPONSES_PASS_THROUGH])(
  'openai SDK, plain text: $title',
  (lane: Lane) => {
    it('plain text: the responses.stream helper gives what responses.create gives', async () => {
      rig().scriptText(lane, PLAIN.reply);
      rig().scriptText(lane, PLAIN.reply);
      const plain = await client.responses.create({ model: lane.model, input: PLAIN.prompt });
      expectPlainText(lane, plain.output_text);
      const final = await client.responses.stream({ model: lane.model, input: PLAIN.prompt }).finalResponse();
      expect(final.output_text).toBe(plain.output_text);
      expect(final.status).toBe('completed');
      expectUpstreamApi(rig(), lane);
    });
  },
);
