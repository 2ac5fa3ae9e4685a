/**
 * The Vercel AI SDK (`ai` + `@ai-sdk/openai`) against Gantry, through every provider kind: a tool loop
 * the SDK runs itself (generateText with several steps), the same loop streamed (streamText's full
 * stream), two tools called at once, toolChoice (a named tool, none), generateObject and streamObject
 * with a zod schema, an image part, and plain text (also on Responses passed through). Chat lanes use
 * `provider.chat(model)`, Responses lanes `provider.responses(model)`. See test/helpers/clients.ts for
 * the lanes and what each asserts.
 */
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, stepCountIs, streamObject, streamText, tool } from 'ai';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CLOCK,
  expectClockArgs,
  expectFinalParallelText,
  expectFinalWeatherText,
  expectImageReply,
  expectPerson,
  expectPlainText,
  expectUpstreamApi,
  expectUpstreamImage,
  expectUpstreamParallelResults,
  expectUpstreamSchema,
  expectUpstreamToolChoice,
  expectUpstreamToolLoop,
  expectWeatherArgs,
  IMAGE,
  LANES,
  type Lane,
  PARALLEL,
  PERSON,
  PLAIN,
  PLAIN_LANES,
  useClientsRig,
  WEATHER,
} from '../../helpers/clients.js';

const rig = useClientsRig();

function modelFor(lane: Lane) {
  const provider = createOpenAI({
    baseURL: rig().gantry.baseURL,
    apiKey: rig().gantry.key,
    fetch: rig().fetch,
  });
  return lane.api === 'chat' ? provider.chat(lane.model) : provider.responses(lane.model);
}

/** A tool as the SDK declares it, answering `spec.result`; records each input it is executed with. */
function recordingTool<T>(
  spec: { description: string; result: string },
  inputSchema: z.ZodType<T>,
  calls: unknown[],
) {
  return tool({
    description: spec.description,
    inputSchema,
    execute: async (input: T) => {
      calls.push(input);
      return spec.result;
    },
  });
}

const weatherTool = (calls: unknown[]) =>
  recordingTool(WEATHER, z.object({ city: z.string().describe('The city name') }), calls);
const clockTool = (calls: unknown[]) =>
  recordingTool(CLOCK, z.object({ timezone: z.string().describe('An IANA time zone') }), calls);

const personSchema = z.object({ name: z.string(), age: z.number() });

describe.each(LANES)('Vercel AI SDK: $title', (lane) => {
  it('generateText runs the tool the model calls, then returns the final text', async () => {
    rig().scriptToolCall(lane, WEATHER.name, WEATHER.args);
    rig().scriptText(lane, WEATHER.finalText);
    const executed: unknown[] = [];
    const result = await generateText({
      model: modelFor(lane),
      tools: { [WEATHER.name]: weatherTool(executed) },
      stopWhen: stepCountIs(3),
      prompt: WEATHER.prompt,
      maxRetries: 0,
    });

    expect(result.steps).toHaveLength(2);
    const call = result.steps[0]?.toolCalls[0];
    expect(call?.toolName).toBe(WEATHER.name);
    expectWeatherArgs(lane, call?.input);
    expect(executed).toEqual([call?.input]);
    expect(result.steps[0]?.finishReason).toBe('tool-calls');
    expectFinalWeatherText(lane, result.text);
    expect(result.finishReason).toBe('stop');
    expectUpstreamToolLoop(rig(), lane);
  });

  it('streamText streams the tool call, its result and the final text', async () => {
    rig().scriptToolCall(lane, WEATHER.name, WEATHER.args);
    rig().scriptText(lane, WEATHER.finalText);
    const executed: unknown[] = [];
    const result = streamText({
      model: modelFor(lane),
      tools: { [WEATHER.name]: weatherTool(executed) },
      stopWhen: stepCountIs(3),
      prompt: WEATHER.prompt,
      maxRetries: 0,
    });

    const order: string[] = [];
    let text = '';
    const toolCalls: { toolName: string; input: unknown }[] = [];
    const toolResults: unknown[] = [];
    for await (const part of result.fullStream) {
      if (part.type === 'error') throw part.error;
      if (part.type === 'tool-call') {
        order.push('tool-call');
        toolCalls.push({ toolName: part.toolName, input: part.input });
      } else if (part.type === 'tool-result') {
        order.push('tool-result');
        toolResults.push(part.output);
      } else if (part.type === 'text-delta') {
        if (order.at(-1) !== 'text') order.push('text');
        text += part.text;
      }
    }

    expect(order).toEqual(['tool-call', 'tool-result', 'text']);
    expect(toolCalls).toHaveLength(1);
    expect(toolCalls[0]?.toolName).toBe(WEATHER.name);
    expectWeatherArgs(lane, toolCalls[0]?.input);
    expect(toolResults).toEqual([WEATHER.result]);
    expect(executed).toEqual([toolCalls[0]?.input]);
    expectFinalWeatherText(lane, text);
    expect(await result.text).toBe(text);
    expectUpstreamToolLoop(rig(), lane);
  });

  it('streamText with parallel tool calls runs both tools, then streams the final text', async () => {
    rig().scriptToolCalls(lane, PARALLEL.calls);
    rig().scriptText(lane, PARALLEL.finalText);
    const weatherCalls: unknown[] = [];
    const clockCalls: unknown[] = [];
    const result = streamText({
      model: modelFor(lane),
      tools: { [WEATHER.name]: weatherTool(weatherCalls), [CLOCK.name]: clockTool(clockCalls) },
      stopWhen: stepCountIs(3),
      prompt: PARALLEL.prompt,
      maxRetries: 0,
    });
    const calls: string[] = [];
    const results: unknown[] = [];
    let text = '';
    for await (const part of result.fullStream) {
      if (part.type === 'error') throw part.error;
      if (part.type === 'tool-call') calls.push(part.toolName);
      if (part.type === 'tool-result') results.push(part.output);
      if (part.type === 'text-delta') text += part.text;
    }
    expect(calls).toEqual([WEATHER.name, CLOCK.name]);
    expect([...results].sort()).toEqual([WEATHER.result, CLOCK.result].sort());
    expect(weatherCalls).toHaveLength(1);
    expect(clockCalls).toHaveLength(1);
    expectWeatherArgs(lane, weatherCalls[0]);
    expectClockArgs(lane, clockCalls[0]);
    expectFinalParallelText(lane, text);
    expectUpstreamParallelResults(rig(), lane);
  });

  it('toolChoice names a tool: that tool is called', async () => {
    rig().scriptToolCall(lane, CLOCK.name, CLOCK.args);
    const clockCalls: unknown[] = [];
    const result = await generateText({
      model: modelFor(lane),
      tools: { [WEATHER.name]: weatherTool([]), [CLOCK.name]: clockTool(clockCalls) },
      toolChoice: { type: 'tool', toolName: CLOCK.name },
      stopWhen: stepCountIs(1),
      prompt: WEATHER.prompt,
      maxRetries: 0,
    });
    expect(result.toolCalls.map((c) => c.toolName)).toEqual([CLOCK.name]);
    expectClockArgs(lane, clockCalls[0]);
    expectUpstreamToolChoice(rig(), lane, { name: CLOCK.name });
  });

  it("toolChoice 'none': the model answers text without calling the tool", async () => {
    rig().scriptText(lane, PLAIN.reply);
    const executed: unknown[] = [];
    const result = await generateText({
      model: modelFor(lane),
      tools: { [WEATHER.name]: weatherTool(executed) },
      toolChoice: 'none',
      prompt: PLAIN.prompt,
      maxRetries: 0,
    });
    expect(result.toolCalls).toEqual([]);
    expect(executed).toEqual([]);
    expectPlainText(lane, result.text);
    expectUpstreamToolChoice(rig(), lane, 'none');
  });

  it('generateObject returns an object of the zod schema', async () => {
    rig().scriptObject(lane, PERSON.value);
    const result = await generateObject({
      model: modelFor(lane),
      schema: personSchema,
      schemaName: PERSON.name,
      prompt: PERSON.prompt,
      maxRetries: 0,
    });
    expectPerson(lane, result.object);
    expect(personSchema.safeParse(result.object).success).toBe(true);
    expectUpstreamSchema(rig(), lane);
  });

  it('streamObject streams partial objects up to one of the zod schema', async () => {
    rig().scriptObject(lane, PERSON.value);
    const result = streamObject({
      model: modelFor(lane),
      schema: personSchema,
      schemaName: PERSON.name,
      prompt: PERSON.prompt,
      maxRetries: 0,
    });
    let partials = 0;
    for await (const _partial of result.partialObjectStream) partials++;
    const object = await result.object;
    expect(partials).toBeGreaterThan(0);
    expectPerson(lane, object);
    expectUpstreamSchema(rig(), lane);
  });

  it('generateText sends an image part', async () => {
    rig().scriptText(lane, IMAGE.reply);
    const result = await generateText({
      model: modelFor(lane),
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: IMAGE.prompt },
            { type: 'image', image: Buffer.from(IMAGE.base64, 'base64'), mediaType: IMAGE.mediaType },
          ],
        },
      ],
      maxRetries: 0,
    });
    expectImageReply(lane, result.text);
    expectUpstreamImage(rig(), lane);
  });
});

describe.each(PLAIN_LANES)('Vercel AI SDK, plain text: $title', (lane) => {
  it('generateText and streamText answer plain text', async () => {
    rig().scriptText(lane, PLAIN.reply);
    rig().scriptText(lane, PLAIN.reply);
    const plain = await generateText({ model: modelFor(lane), prompt: PLAIN.prompt, maxRetries: 0 });
    expectPlainText(lane, plain.text);
    expect(plain.finishReason).toBe('stop');
    const streamed = streamText({ model: modelFor(lane), prompt: PLAIN.prompt, maxRetries: 0 });
    let text = '';
    for await (const piece of streamed.textStream) text += piece;
    expect(text).toBe(plain.text);
    expectUpstreamApi(rig(), lane);
  });
});
