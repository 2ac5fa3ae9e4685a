/**
 * safeResponseEvents on every kind of completion text a Responses stream carries (README, "Safety" →
 * "Responses"): refusal and reasoning deltas, text that arrives only in done events or in the terminal
 * Response, and the failure rules of a classifier that cannot run mid-stream (annotate reports the error
 * in `content_filters` and ends normally; block fails open or closed). Annotated events pass untouched.
 * Every event out is checked against OpenAI's schemas.
 */
import { describe, expect, it } from 'vitest';
import type { JsonObject, SseEvent } from '../../providers/types.js';
import { GantryError } from '../../src/errors.js';
import { Metrics } from '../../src/metrics.js';
import { chatStreamToResponseEvents } from '../../src/responses/bridge.js';
import { ClassifierUnavailable, type TextClassifier } from '../../src/safety/classifier.js';
import { type ActiveSafety, type FailurePolicy, newSafetyOutcome } from '../../src/safety/engine.js';
import { offlineClassifier } from '../../src/safety/offline/index.js';
import { PRESET_POLICIES } from '../../src/safety/policy.js';
import { contentFilterEntry } from '../../src/safety/responses.js';
import { type StreamSafety, safeResponseEvents } from '../../src/safety/responses-stream.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { chatChunks, iterate, meta } from '../responses/fixtures.js';

const VIOLENT = 'I am going to kill you, I know where you live and I have a gun';
const CLEAN = 'Have a lovely day';

const EVENT_SCHEMAS: Record<string, string> = {
  'response.created': 'ResponseCreatedEvent',
  'response.in_progress': 'ResponseInProgressEvent',
  'response.output_item.added': 'ResponseOutputItemAddedEvent',
  'response.content_part.added': 'ResponseContentPartAddedEvent',
  'response.content_part.done': 'ResponseContentPartDoneEvent',
  'response.output_text.delta': 'ResponseTextDeltaEvent',
  'response.output_text.done': 'ResponseTextDoneEvent',
  'response.refusal.delta': 'ResponseRefusalDeltaEvent',
  'response.refusal.done': 'ResponseRefusalDoneEvent',
  'response.reasoning_text.delta': 'ResponseReasoningTextDeltaEvent',
  'response.reasoning_text.done': 'ResponseReasoningTextDoneEvent',
  'response.output_item.done': 'ResponseOutputItemDoneEvent',
  'response.function_call_arguments.delta': 'ResponseFunctionCallArgumentsDeltaEvent',
  'response.function_call_arguments.done': 'ResponseFunctionCallArgumentsDoneEvent',
  'response.custom_tool_call_input.delta': 'ResponseCustomToolCallInputDeltaEvent',
  'response.custom_tool_call_input.done': 'ResponseCustomToolCallInputDoneEvent',
  'response.mcp_call_arguments.delta': 'ResponseMCPCallArgumentsDeltaEvent',
  'response.mcp_call_arguments.done': 'ResponseMCPCallArgumentsDoneEvent',
  'response.completed': 'ResponseCompletedEvent',
  'response.incomplete': 'ResponseIncompleteEvent',
};

const BASE = {
  id: 'resp_text1',
  object: 'response',
  created_at: 1_750_000_000,
  background: false,
  error: null,
  incomplete_details: null,
  instructions: null,
  max_output_tokens: null,
  max_tool_calls: null,
  model: 'fake-model',
  parallel_tool_calls: true,
  previous_response_id: null,
  reasoning: { effort: null, summary: null },
  store: true,
  temperature: 1,
  text: { format: { type: 'text' } },
  tool_choice: 'auto',
  tools: [],
  top_logprobs: 0,
  top_p: 1,
  truncation: 'disabled',
  metadata: {},
};

const pieces = (text: string) => text.match(/\s*\S+/g) ?? [];

/** A native stream: created, `middle`, then response.completed with `output`. */
function stream(middle: JsonObject[], output: JsonObject[]): SseEvent[] {
  const events: JsonObject[] = [
    {
      type: 'response.created',
      response: { ...BASE, status: 'in_progress', completed_at: null, output: [] },
    },
    ...middle,
    {
      type: 'response.completed',
      response: { ...BASE, status: 'completed', completed_at: 1_750_000_001, output },
    },
  ];
  return events.map((e, i) => ({
    event: String(e.type),
    data: JSON.stringify({ ...e, sequence_number: i }),
  }));
}

/** One message whose single part is a refusal, said delta by delta. */
function refusalStream(text: string): SseEvent[] {
  const at = { item_id: 'msg_1', output_index: 0, content_index: 0 };
  const item = (status: string, refusal: string | undefined) => ({
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    status,
    content: refusal === undefined ? [] : [{ type: 'refusal', refusal }],
  });
  return stream(
    [
      { type: 'response.output_item.added', output_index: 0, item: item('in_progress', undefined) },
      { type: 'response.content_part.added', ...at, part: { type: 'refusal', refusal: '' } },
      ...pieces(text).map((delta) => ({ type: 'response.refusal.delta', ...at, delta })),
      { type: 'response.refusal.done', ...at, refusal: text },
      { type: 'response.content_part.done', ...at, part: { type: 'refusal', refusal: text } },
      { type: 'response.output_item.done', output_index: 0, item: item('completed', text) },
    ],
    [item('completed', text)],
  );
}

/** A reasoning item whose text comes as reasoning_text deltas, then a clean message. */
function reasoningStream(reasoning: string): SseEvent[] {
  const at = { item_id: 'rs_1', output_index: 0, content_index: 0 };
  const item = (status: string, text: string | undefined) => ({
    id: 'rs_1',
    type: 'reasoning',
    status,
    summary: [],
    content: text === undefined ? [] : [{ type: 'reasoning_text', text }],
  });
  return stream(
    [
      { type: 'response.output_item.added', output_index: 0, item: item('in_progress', undefined) },
      { type: 'response.content_part.added', ...at, part: { type: 'reasoning_text', text: '' } },
      ...pieces(reasoning).map((delta) => ({ type: 'response.reasoning_text.delta', ...at, delta })),
      { type: 'response.reasoning_text.done', ...at, text: reasoning },
      { type: 'response.output_item.done', output_index: 0, item: item('completed', reasoning) },
    ],
    [item('completed', reasoning)],
  );
}

/** A function call whose arguments come only whole, in the done events (no delta). */
function doneOnlyCall(args: string): SseEvent[] {
  const call = (status: string, a: string) => ({
    id: 'fc_1',
    type: 'function_call',
    status,
    call_id: 'call_1',
    name: 'say',
    arguments: a,
  });
  return stream(
    [
      { type: 'response.output_item.added', output_index: 0, item: call('in_progress', '') },
      {
        type: 'response.function_call_arguments.done',
        item_id: 'fc_1',
        name: 'say',
        output_index: 0,
        arguments: args,
      },
      { type: 'response.output_item.done', output_index: 0, item: call('completed', args) },
    ],
    [call('completed', args)],
  );
}

/** A message whose text is only in the terminal Response: no delta, no done event carried it. */
function terminalOnly(text: string): SseEvent[] {
  return stream(
    [],
    [
      {
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        status: 'completed',
        content: [{ type: 'output_text', text, annotations: [], logprobs: [] }],
      },
    ],
  );
}

/** A message said delta by delta (output_text). */
function textStream(text: string): SseEvent[] {
  const at = { item_id: 'msg_1', output_index: 0, content_index: 0 };
  const part = (t: string) => ({ type: 'output_text', text: t, annotations: [], logprobs: [] });
  const item = (status: string, content: JsonObject[]) => ({
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    status,
    content,
  });
  return stream(
    [
      { type: 'response.output_item.added', output_index: 0, item: item('in_progress', []) },
      { type: 'response.content_part.added', ...at, part: part('') },
      ...pieces(text).map((delta) => ({ type: 'response.output_text.delta', ...at, delta, logprobs: [] })),
      { type: 'response.output_text.done', ...at, text, logprobs: [] },
      { type: 'response.content_part.done', ...at, part: part(text) },
      { type: 'response.output_item.done', output_index: 0, item: item('completed', [part(text)]) },
    ],
    [item('completed', [part(text)])],
  );
}

function safetyOf(
  mode: 'annotate' | 'block',
  classifier: TextClassifier = offlineClassifier(),
  onFailure: FailurePolicy = 'open',
): StreamSafety & { aborted: () => number } {
  const active: ActiveSafety = {
    policy: PRESET_POLICIES[mode] as ActiveSafety['policy'],
    classifier,
    onFailure,
  };
  let aborted = 0;
  const prompt = contentFilterEntry(
    'prompt',
    { results: {}, flagged: [], blocked: false, findings: { harm: {}, detected: {} } },
    0,
  );
  return {
    active,
    outcome: newSafetyOutcome(),
    metrics: new Metrics(),
    windowChars: 16,
    prompt,
    abort: () => {
      aborted++;
    },
    aborted: () => aborted,
  };
}

async function run(events: SseEvent[], s: StreamSafety): Promise<{ out: SseEvent[]; parsed: JsonObject[] }> {
  const out: SseEvent[] = [];
  for await (const e of safeResponseEvents(iterate(events), s)) out.push(e);
  const parsed = out.map((e) => JSON.parse(e.data) as JsonObject);
  for (const e of parsed) {
    const schema = EVENT_SCHEMAS[String(e.type)];
    expect(schema, String(e.type)).toBeDefined();
    assertOpenAISchema(schema as string, e);
  }
  return { out, parsed };
}

function completionOf(last: JsonObject): JsonObject {
  const filters = (last.response as JsonObject).content_filters as JsonObject[];
  return filters[1] as JsonObject;
}

describe('block: every completion text is checked before it goes out', () => {
  const cases: Array<{ name: string; events: () => SseEvent[] }> = [
    { name: 'refusal deltas', events: () => refusalStream(VIOLENT) },
    { name: 'reasoning_text deltas', events: () => reasoningStream(VIOLENT) },
    {
      name: 'function call arguments only in done events',
      events: () => doneOnlyCall(JSON.stringify({ t: VIOLENT })),
    },
    { name: 'text only in the terminal Response', events: () => terminalOnly(VIOLENT) },
  ];
  it.each(cases)('$name: flagged text never released, the stream ends incomplete', async ({ events }) => {
    const s = safetyOf('block');
    const { out, parsed } = await run(events(), s);
    expect(out.map((e) => e.data).join('\n')).not.toContain('kill');
    const last = parsed.at(-1) as JsonObject;
    expect(last.type).toBe('response.incomplete');
    expect((last.response as JsonObject).incomplete_details).toEqual({ reason: 'content_filter' });
    expect(completionOf(last).blocked).toBe(true);
    expect(s.aborted()).toBe(1);
    expect(parsed.map((e) => e.sequence_number)).toEqual(parsed.map((_, i) => i));
  });

  it('bridged: chat reasoning_content (response.reasoning_text deltas) is checked too', async () => {
    const [first, ...rest] = chatChunks([CLEAN]);
    const reasoning = pieces(VIOLENT).map((piece) => ({
      data: JSON.stringify({
        id: 'c',
        object: 'chat.completion.chunk',
        created: 1,
        model: 'm',
        choices: [{ index: 0, delta: { reasoning_content: piece }, finish_reason: null }],
      }),
    }));
    const bridged: SseEvent[] = [];
    for await (const e of chatStreamToResponseEvents(
      iterate([first as SseEvent, ...reasoning, ...rest]),
      meta(),
      () => {},
    )) {
      bridged.push(e);
    }
    expect(bridged.some((e) => e.event === 'response.reasoning_text.delta')).toBe(true);
    const s = safetyOf('block');
    const { out, parsed } = await run(bridged, s);
    expect(out.map((e) => e.data).join('\n')).not.toContain('kill');
    expect((parsed.at(-1) as JsonObject).type).toBe('response.incomplete');
  });

  it('clean refusal and reasoning pass whole, the results say clean and cover all of it', async () => {
    for (const events of [refusalStream(CLEAN), reasoningStream(CLEAN), doneOnlyCall(`{"t":"${CLEAN}"}`)]) {
      const s = safetyOf('block');
      const { parsed } = await run(events, s);
      const last = parsed.at(-1) as JsonObject;
      expect(last.type).toBe('response.completed');
      const entry = completionOf(last);
      expect(entry.blocked).toBe(false);
      const offsets = entry.content_filter_offsets as JsonObject;
      expect(offsets.end_offset).toBeGreaterThanOrEqual(CLEAN.length);
      // check_offset: everything up to the end has been checked.
      expect(offsets.check_offset).toBe(offsets.end_offset);
    }
  });
});

describe('annotate: refusal and reasoning are checked and reported', () => {
  it.each([
    ['refusal', () => refusalStream(VIOLENT)],
    ['reasoning', () => reasoningStream(VIOLENT)],
    ['done-only arguments', () => doneOnlyCall(JSON.stringify({ t: VIOLENT }))],
  ] as const)('%s', async (_name, events) => {
    const s = safetyOf('annotate');
    const { parsed } = await run(events(), s);
    const last = parsed.at(-1) as JsonObject;
    expect(last.type).toBe('response.completed');
    expect(completionOf(last).content_filter_results).toMatchObject({
      violence: { severity: expect.stringMatching(/^(medium|high)$/) },
    });
    expect(s.outcome.flagged.has('violence')).toBe(true);
  });

  it('every event but the terminal one goes out as it came, byte for byte', async () => {
    const events = textStream(VIOLENT);
    const { out } = await run(events, safetyOf('annotate'));
    expect(out).toHaveLength(events.length);
    for (let i = 0; i < events.length - 1; i++) expect(out[i]).toBe(events[i]);
    expect(out.at(-1)).not.toBe(events.at(-1));
  });
});

/** A classifier that answers the first `good` texts, then cannot run (a service that went down). */
function failingAfter(good: number): TextClassifier {
  const offline = offlineClassifier();
  let calls = 0;
  return {
    name: 'remote',
    classify: async (text, source) => {
      if (calls++ >= good) throw new ClassifierUnavailable('remote', 'the classifier service answered 503');
      return offline.classify(text, source);
    },
  };
}

describe('a classifier that fails mid-stream', () => {
  const long = `${CLEAN}. `.repeat(6);

  it.each(['open', 'closed'] as const)(
    'annotate, on_failure %s: the error is in content_filters and the stream ends with its terminal event',
    async (onFailure) => {
      const s = safetyOf('annotate', failingAfter(1), onFailure);
      const { parsed } = await run(textStream(long), s);
      const last = parsed.at(-1) as JsonObject;
      expect(last.type).toBe('response.completed');
      expect(completionOf(last).content_filter_results).toEqual({
        error: {
          code: 'content_filter_error',
          message: 'The contents are not filtered: the classifier service answered 503',
        },
      });
    },
  );

  it('block, on_failure open: the text is released, the results carry the error', async () => {
    const s = safetyOf('block', failingAfter(1), 'open');
    const { parsed } = await run(textStream(long), s);
    const last = parsed.at(-1) as JsonObject;
    expect(last.type).toBe('response.completed');
    expect(completionOf(last).content_filter_results).toMatchObject({
      error: { code: 'content_filter_error' },
    });
  });

  it('block, on_failure closed: the stream fails (503 content_filter_unavailable), nothing unchecked released', async () => {
    const s = safetyOf('block', failingAfter(1), 'closed');
    const out: JsonObject[] = [];
    let error: unknown;
    try {
      for await (const e of safeResponseEvents(iterate(textStream(long)), s)) out.push(JSON.parse(e.data));
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(GantryError);
    expect((error as GantryError).code).toBe('content_filter_unavailable');
    const released = out
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    // Only the first window (16 characters and what finished its delta) was checked and released.
    expect(released.length).toBeLessThan(long.length / 2);
    expect(out.some((e) => e.type === 'response.completed')).toBe(false);
  });
});

describe('block: text an added event brings, tool inputs, and the closing events of a blocked stream', () => {
  const part = (t: string) => ({ type: 'output_text', text: t, annotations: [], logprobs: [] });
  const message = (status: string, text: string | undefined) => ({
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    status,
    content: text === undefined ? [] : [part(text)],
  });
  const at = { item_id: 'msg_1', output_index: 0, content_index: 0 };
  /** Clean deltas (released in their own windows) for item 0, then `then` from output index 1 on. */
  const cleanThen = (then: JsonObject[], output: JsonObject[]) => {
    const clean = `${CLEAN}. ${CLEAN}. ${CLEAN}.`;
    return stream(
      [
        { type: 'response.output_item.added', output_index: 0, item: message('in_progress', undefined) },
        { type: 'response.content_part.added', ...at, part: part('') },
        ...pieces(clean).map((delta) => ({ type: 'response.output_text.delta', ...at, delta, logprobs: [] })),
        ...then,
      ],
      output,
    );
  };
  /** The blocked end: no threat anywhere, every item added is closed with exactly what was released. */
  const expectBlocked = (out: SseEvent[], parsed: JsonObject[], s: ReturnType<typeof safetyOf>) => {
    const wire = out.map((e) => e.data).join('\n');
    expect(wire).not.toContain('kill');
    expect(wire).not.toContain('gun');
    const last = parsed.at(-1) as JsonObject;
    expect(last.type).toBe('response.incomplete');
    expect(completionOf(last).blocked).toBe(true);
    expect(s.aborted()).toBe(1);
    const added = parsed.filter((e) => e.type === 'response.output_item.added').map((e) => e.output_index);
    const done = parsed.filter((e) => e.type === 'response.output_item.done').map((e) => e.output_index);
    expect(done).toEqual(added);
  };

  it('a message item added with its text already filled is checked before it goes out', async () => {
    const s = safetyOf('block');
    const events = stream(
      [
        { type: 'response.output_item.added', output_index: 0, item: message('in_progress', VIOLENT) },
        { type: 'response.output_item.done', output_index: 0, item: message('completed', VIOLENT) },
      ],
      [message('completed', VIOLENT)],
    );
    const { out, parsed } = await run(events, s);
    expectBlocked(out, parsed, s);
  });

  it('a function call added with its arguments after released text: the closing events repeat only the released text', async () => {
    const s = safetyOf('block');
    const args = JSON.stringify({ t: VIOLENT });
    const call = {
      id: 'fc_1',
      type: 'function_call',
      status: 'in_progress',
      call_id: 'c1',
      name: 'say',
      arguments: args,
    };
    const { out, parsed } = await run(
      cleanThen([{ type: 'response.output_item.added', output_index: 1, item: call }], []),
      s,
    );
    expectBlocked(out, parsed, s);
    const released = parsed
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    expect(released.length).toBeGreaterThan(0);
    const closing = parsed.find((e) => e.type === 'response.output_text.done') as JsonObject;
    expect(closing.text).toBe(released);
    const output = ((parsed.at(-1) as JsonObject).response as JsonObject).output as JsonObject[];
    expect(output.map((i) => i.type)).toEqual(['message']);
  });

  it('custom tool call input deltas are held and checked; the closing input is what was released', async () => {
    const s = safetyOf('block');
    const item = (input: string, status?: string) => ({
      id: 'ctc_1',
      type: 'custom_tool_call',
      call_id: 'call_1',
      name: 'say',
      input,
      ...(status === undefined ? {} : { status }),
    });
    const where = { item_id: 'ctc_1', output_index: 1 };
    const { out, parsed } = await run(
      cleanThen(
        [
          { type: 'response.output_item.added', output_index: 1, item: item('') },
          ...pieces(VIOLENT).map((delta) => ({
            type: 'response.custom_tool_call_input.delta',
            ...where,
            delta,
          })),
          { type: 'response.custom_tool_call_input.done', ...where, input: VIOLENT },
          { type: 'response.output_item.done', output_index: 1, item: item(VIOLENT) },
        ],
        [item(VIOLENT)],
      ),
      s,
    );
    expectBlocked(out, parsed, s);
    const released = parsed
      .filter((e) => e.type === 'response.custom_tool_call_input.delta')
      .map((e) => e.delta)
      .join('');
    const closing = parsed.find((e) => e.type === 'response.custom_tool_call_input.done') as JsonObject;
    expect(closing.input).toBe(released);
  });

  it('MCP call arguments deltas are held and checked', async () => {
    const s = safetyOf('block');
    const args = JSON.stringify({ t: VIOLENT });
    const item = (a: string, status: string) => ({
      id: 'mcp_1',
      type: 'mcp_call',
      server_label: 'srv',
      name: 'say',
      arguments: a,
      status,
    });
    const where = { item_id: 'mcp_1', output_index: 1 };
    const { out, parsed } = await run(
      cleanThen(
        [
          { type: 'response.output_item.added', output_index: 1, item: item('', 'in_progress') },
          ...pieces(args).map((delta) => ({ type: 'response.mcp_call_arguments.delta', ...where, delta })),
          { type: 'response.mcp_call_arguments.done', ...where, arguments: args },
          { type: 'response.output_item.done', output_index: 1, item: item(args, 'completed') },
        ],
        [item(args, 'completed')],
      ),
      s,
    );
    expectBlocked(out, parsed, s);
  });
});

describe('block: a delta longer than a window is released a window at a time', () => {
  /** 2,500 characters without a sentence end: only the 1,000-character limit closes a window. */
  const LONG = 'lovely flowers and tea '.repeat(109).slice(0, 2500);
  const oneDelta = (text: string) => {
    const events = textStream('x');
    const i = events.findIndex((e) => e.event === 'response.output_text.delta');
    const delta = JSON.parse((events[i] as SseEvent).data) as JsonObject;
    events[i] = { event: 'response.output_text.delta', data: JSON.stringify({ ...delta, delta: text }) };
    return events;
  };
  const deltas = (parsed: JsonObject[]) =>
    parsed.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta as string);

  it('one 2,500-character delta goes out as 1,000 + 1,000 + 500', async () => {
    const s = { ...safetyOf('block'), windowChars: 400 };
    const { parsed } = await run(oneDelta(LONG), s);
    expect(deltas(parsed)).toEqual([LONG.slice(0, 1000), LONG.slice(1000, 2000), LONG.slice(2000)]);
    expect((parsed.at(-1) as JsonObject).type).toBe('response.completed');
    expect(parsed.map((e) => e.sequence_number)).toEqual(parsed.map((_, i) => i));
  });

  it('the windows before a threat in the same delta are released, the threat is not', async () => {
    const s = { ...safetyOf('block'), windowChars: 400 };
    const { out, parsed } = await run(oneDelta(`${LONG.slice(0, 2100)}${VIOLENT}`), s);
    expect(deltas(parsed)).toEqual([LONG.slice(0, 1000), LONG.slice(1000, 2000)]);
    expect(out.map((e) => e.data).join('\n')).not.toContain('kill');
    const last = parsed.at(-1) as JsonObject;
    expect(last.type).toBe('response.incomplete');
    const closing = parsed.find((e) => e.type === 'response.output_text.done') as JsonObject;
    expect(closing.text).toBe(LONG.slice(0, 2000));
  });
});
