/**
 * LangChain JS (`@langchain/openai` ChatOpenAI) against Gantry, through every provider kind: bindTools
 * (the tool call on the AIMessage, and the streamed tool-call chunks concatenated into the same call,
 * parallel ones by index), a tool round trip (ToolMessage back, final text), withStructuredOutput with a
 * zod schema by the json_schema and function-calling methods and in JSON mode, an image_url part, and plain
 * text (also on Responses passed through). Chat lanes use chat completions, Responses lanes
 * `useResponsesApi: true`. See test/helpers/clients.ts for the lanes and what each asserts.
 */
import { type AIMessageChunk, type BaseMessage, HumanMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { ChatOpenAI } from '@langchain/openai';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CLOCK,
  expectClockArgs,
  expectFinalWeatherText,
  expectImageReply,
  expectPerson,
  expectPlainText,
  expectUpstreamApi,
  expectUpstreamImage,
  expectUpstreamJsonMode,
  expectUpstreamSchema,
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

function chatModel(lane: Lane): ChatOpenAI {
  return new ChatOpenAI({
    model: lane.model,
    apiKey: rig().gantry.key,
    maxRetries: 0,
    useResponsesApi: lane.api === 'responses',
    configuration: { baseURL: rig().gantry.baseURL, fetch: rig().fetch },
  });
}

const weather = tool(async () => WEATHER.result, {
  name: WEATHER.name,
  description: WEATHER.description,
  schema: z.object({ city: z.string().describe('The city name') }),
});

const clock = tool(async () => CLOCK.result, {
  name: CLOCK.name,
  description: CLOCK.description,
  schema: z.object({ timezone: z.string().describe('An IANA time zone') }),
});

const personSchema = z.object({ name: z.string(), age: z.number() });

function textOf(message: BaseMessage): string {
  return typeof message.content === 'string'
    ? message.content
    : message.content
        .map((part) => ('text' in part && typeof part.text === 'string' ? part.text : ''))
        .join('');
}

describe.each(LANES)('LangChain: $title', (lane) => {
  it('bindTools: the AIMessage carries the tool call; its result gives the final text', async () => {
    rig().scriptToolCall(lane, WEATHER.name, WEATHER.args);
    rig().scriptText(lane, WEATHER.finalText);
    const model = chatModel(lane).bindTools([weather]);
    const history: BaseMessage[] = [new HumanMessage(WEATHER.prompt)];

    const ai = await model.invoke(history);
    expect(ai.tool_calls).toHaveLength(1);
    const call = ai.tool_calls?.[0];
    expect(call?.name).toBe(WEATHER.name);
    expectWeatherArgs(lane, call?.args);
    expect(call?.id).toEqual(expect.any(String));

    history.push(ai);
    if (!call) throw new Error('no tool call');
    history.push(await weather.invoke(call));
    const final = await model.invoke(history);
    expect(final.tool_calls ?? []).toEqual([]);
    expectFinalWeatherText(lane, textOf(final));
    expectUpstreamToolLoop(rig(), lane);
  });

  it('bindTools streamed: the tool call chunks add up to the same call', async () => {
    rig().scriptToolCall(lane, WEATHER.name, WEATHER.args);
    const model = chatModel(lane).bindTools([weather]);
    let merged: AIMessageChunk | undefined;
    let chunks = 0;
    for await (const chunk of await model.stream(WEATHER.prompt)) {
      chunks++;
      merged = merged ? merged.concat(chunk) : chunk;
    }
    expect(chunks).toBeGreaterThan(1);
    expect(merged?.tool_calls).toHaveLength(1);
    const call = merged?.tool_calls?.[0];
    expect(call?.name).toBe(WEATHER.name);
    expectWeatherArgs(lane, call?.args);
    expect(call?.id).toEqual(expect.any(String));
    // The pieces of the arguments, concatenated, are the JSON the call carries.
    const pieces = merged?.tool_call_chunks ?? [];
    expect(pieces).toHaveLength(1);
    expect(JSON.parse(pieces[0]?.args ?? '')).toEqual(call?.args);
    if (lane.kind !== 'local-chat') {
      const upstream = lane.kind === 'anthropic' ? rig().anthropic.requests : rig().openai.requests;
      expect(upstream[0]?.body?.stream).toBe(true);
    }
  });

  it('bindTools streamed with parallel calls: each call gets its own index and arguments', async () => {
    rig().scriptToolCalls(lane, PARALLEL.calls);
    const model = chatModel(lane).bindTools([weather, clock]);
    let merged: AIMessageChunk | undefined;
    for await (const chunk of await model.stream(PARALLEL.prompt))
      merged = merged ? merged.concat(chunk) : chunk;
    const calls = merged?.tool_calls ?? [];
    expect(calls.map((c) => c.name)).toEqual([WEATHER.name, CLOCK.name]);
    expectWeatherArgs(lane, calls[0]?.args);
    expectClockArgs(lane, calls[1]?.args);
    expect(new Set(calls.map((c) => c.id)).size).toBe(2);
    expect((merged?.tool_call_chunks ?? []).map((c) => c.index)).toEqual([0, 1]);
  });

  it('withStructuredOutput (json_schema) returns an object of the zod schema', async () => {
    rig().scriptObject(lane, PERSON.value);
    const model = chatModel(lane).withStructuredOutput(personSchema, {
      name: PERSON.name,
      method: 'jsonSchema',
    });
    const person = await model.invoke(PERSON.prompt);
    expectPerson(lane, person);
    expectUpstreamSchema(rig(), lane);
  });

  it('withStructuredOutput (json mode) returns a JSON object', async () => {
    rig().scriptObject(lane, PERSON.value);
    // A JSON schema rather than zod: JSON mode promises an object, not this schema, so nothing validates it.
    const model = chatModel(lane).withStructuredOutput(
      {
        type: 'object',
        title: PERSON.name,
        properties: { name: { type: 'string' }, age: { type: 'number' } },
      },
      { method: 'jsonMode' },
    );
    const value: unknown = await model.invoke(`${PERSON.prompt} Answer in JSON.`);
    if (lane.scripted) expect(value).toEqual(PERSON.value);
    else expect(value).toEqual(expect.any(Object));
    expect(Array.isArray(value)).toBe(false);
    expectUpstreamJsonMode(rig(), lane);
  });

  it('withStructuredOutput (function calling) returns an object of the zod schema', async () => {
    // The function-calling method forces a tool named after the schema: every kind answers with a call.
    rig().scriptToolCall(lane, PERSON.name, PERSON.value);
    const model = chatModel(lane).withStructuredOutput(personSchema, {
      name: PERSON.name,
      method: 'functionCalling',
    });
    const person = await model.invoke(PERSON.prompt);
    expectPerson(lane, person);
    expectUpstreamSchema(rig(), lane, 'tool');
  });

  it('invoke sends an image_url part', async () => {
    rig().scriptText(lane, IMAGE.reply);
    const message = new HumanMessage({
      content: [
        { type: 'text', text: IMAGE.prompt },
        { type: 'image_url', image_url: { url: IMAGE.dataUrl } },
      ],
    });
    const answer = await chatModel(lane).invoke([message]);
    expectImageReply(lane, textOf(answer));
    expectUpstreamImage(rig(), lane);
  });
});

describe.each(PLAIN_LANES)('LangChain, plain text: $title', (lane) => {
  it('invoke and stream answer plain text', async () => {
    rig().scriptText(lane, PLAIN.reply);
    rig().scriptText(lane, PLAIN.reply);
    const model = chatModel(lane);
    const plain = textOf(await model.invoke(PLAIN.prompt));
    expectPlainText(lane, plain);
    let merged: AIMessageChunk | undefined;
    for await (const chunk of await model.stream(PLAIN.prompt))
      merged = merged ? merged.concat(chunk) : chunk;
    expect(merged ? textOf(merged) : '').toBe(plain);
    expectUpstreamApi(rig(), lane);
  });
});
