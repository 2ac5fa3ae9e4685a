/**
 * safeResponseEvents, table-driven: Responses streams as the bridge makes them from chat chunks and as an
 * upstream that speaks Responses sends them, under annotate and block, with clean and flagged text in
 * message text and in function call arguments. Every event out is checked against OpenAI's schemas.
 */
import { describe, expect, it } from 'vitest';
import type { JsonObject, SseEvent } from '../../providers/types.js';
import { Metrics } from '../../src/metrics.js';
import { chatStreamToResponseEvents } from '../../src/responses/bridge.js';
import { type ActiveSafety, newSafetyOutcome } from '../../src/safety/engine.js';
import { offlineClassifier } from '../../src/safety/offline/index.js';
import { PRESET_POLICIES } from '../../src/safety/policy.js';
import { contentFilterEntry } from '../../src/safety/responses.js';
import { safeResponseEvents, textDelta } from '../../src/safety/responses-stream.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { chatChunks, iterate, meta } from '../responses/fixtures.js';

const VIOLENT = 'I am going to kill you, I know where you live and I have a gun';
const CLEAN = 'Have a lovely day';

/** The specific schema of each event type the streams here send. */
const EVENT_SCHEMAS: Record<string, string> = {
  'response.created': 'ResponseCreatedEvent',
  'response.in_progress': 'ResponseInProgressEvent',
  'response.output_item.added': 'ResponseOutputItemAddedEvent',
  'response.content_part.added': 'ResponseContentPartAddedEvent',
  'response.output_text.delta': 'ResponseTextDeltaEvent',
  'response.output_text.done': 'ResponseTextDoneEvent',
  'response.content_part.done': 'ResponseContentPartDoneEvent',
  'response.output_item.done': 'ResponseOutputItemDoneEvent',
  'response.function_call_arguments.delta': 'ResponseFunctionCallArgumentsDeltaEvent',
  'response.function_call_arguments.done': 'ResponseFunctionCallArgumentsDoneEvent',
  'response.completed': 'ResponseCompletedEvent',
  'response.incomplete': 'ResponseIncompleteEvent',
};

/** A Responses stream as an upstream that speaks the Responses API sends it: one message, word by word. */
function nativeEvents(text: string): SseEvent[] {
  const pieces = text.match(/\s*\S+/g) ?? [];
  const base = {
    id: 'resp_native1',
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
  const part = (t: string) => ({ type: 'output_text', annotations: [], logprobs: [], text: t });
  const item = (status: string, content: JsonObject[]) => ({
    id: 'msg_native1',
    type: 'message',
    status,
    content,
    role: 'assistant',
  });
  const at = { item_id: 'msg_native1', output_index: 0, content_index: 0 };
  const events: JsonObject[] = [
    {
      type: 'response.created',
      response: { ...base, status: 'in_progress', completed_at: null, output: [] },
    },
    {
      type: 'response.in_progress',
      response: { ...base, status: 'in_progress', completed_at: null, output: [] },
    },
    { type: 'response.output_item.added', output_index: 0, item: item('in_progress', []) },
    { type: 'response.content_part.added', ...at, part: part('') },
    ...pieces.map((delta) => ({ type: 'response.output_text.delta', ...at, delta, logprobs: [] })),
    { type: 'response.output_text.done', ...at, text, logprobs: [] },
    { type: 'response.content_part.done', ...at, part: part(text) },
    { type: 'response.output_item.done', output_index: 0, item: item('completed', [part(text)]) },
    {
      type: 'response.completed',
      response: {
        ...base,
        status: 'completed',
        completed_at: 1_750_000_001,
        output: [item('completed', [part(text)])],
        usage: {
          input_tokens: 3,
          input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
          output_tokens: pieces.length,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: 3 + pieces.length,
        },
      },
    },
  ];
  return events.map((e, i) => ({
    event: String(e.type),
    data: JSON.stringify({ ...e, sequence_number: i }),
  }));
}

/** The bridge's stream for chat chunks saying `texts`, or calling a tool with `args` in pieces. */
function bridgedEvents(texts: string[], args?: string[]): AsyncIterable<SseEvent> {
  let chunks = chatChunks(texts);
  if (args) {
    const call = (delta: JsonObject) => ({
      data: JSON.stringify({
        id: 'c',
        object: 'chat.completion.chunk',
        created: 1,
        model: 'm',
        choices: [{ index: 0, delta: { tool_calls: [{ index: 0, ...delta }] }, finish_reason: null }],
      }),
    });
    const [first, ...rest] = chunks;
    chunks = [
      first as SseEvent,
      call({ id: 'call_1', type: 'function', function: { name: 'say', arguments: '' } }),
      ...args.map((a) => call({ function: { arguments: a } })),
      ...rest,
    ];
  }
  return chatStreamToResponseEvents(iterate(chunks), meta(), () => {});
}

function active(mode: 'annotate' | 'block'): ActiveSafety {
  return {
    policy: PRESET_POLICIES[mode] as ActiveSafety['policy'],
    classifier: offlineClassifier(),
    onFailure: 'open',
  };
}

interface Case {
  name: string;
  mode: 'annotate' | 'block';
  source: () => AsyncIterable<SseEvent>;
  /** The stream ends blocked: response.incomplete with content_filter, the upstream aborted. */
  blocked: boolean;
  /** Text that must (or must not) reach the client. */
  released: string[];
  withheld: string[];
  /** Completion entry: the violence severity reported. */
  violence: string;
}

const words = (text: string) => text.match(/\s*\S+/g) ?? [];

const CASES: Case[] = [
  {
    name: 'bridged, annotate, clean',
    mode: 'annotate',
    source: () => bridgedEvents(words(CLEAN)),
    blocked: false,
    released: [CLEAN],
    withheld: [],
    violence: 'safe',
  },
  {
    name: 'bridged, annotate, violent: annotated, nothing held',
    mode: 'annotate',
    source: () => bridgedEvents(words(VIOLENT)),
    blocked: false,
    released: [VIOLENT],
    withheld: [],
    violence: 'high',
  },
  {
    name: 'bridged, block, clean',
    mode: 'block',
    source: () => bridgedEvents(words(`${CLEAN}. `.repeat(4))),
    blocked: false,
    released: [`${CLEAN}. `.repeat(4).trimEnd()],
    withheld: [],
    violence: 'safe',
  },
  {
    name: 'bridged, block, violent in the second window',
    mode: 'block',
    source: () => bridgedEvents([...words(`${CLEAN}. `.repeat(2)), ...words(VIOLENT)]),
    blocked: true,
    released: [`${CLEAN}. ${CLEAN}. `.slice(0, 32)],
    withheld: ['kill'],
    violence: 'high',
  },
  {
    name: 'bridged, block, violent function call arguments',
    mode: 'block',
    source: () => bridgedEvents([], ['{"text":', ` ${JSON.stringify(VIOLENT)}`, '}']),
    blocked: true,
    released: [],
    withheld: ['kill'],
    violence: 'high',
  },
  {
    name: 'passed through, annotate, violent',
    mode: 'annotate',
    source: () => iterate(nativeEvents(VIOLENT)),
    blocked: false,
    released: [VIOLENT],
    withheld: [],
    violence: 'high',
  },
  {
    name: 'passed through, block, clean',
    mode: 'block',
    source: () => iterate(nativeEvents(CLEAN)),
    blocked: false,
    released: [CLEAN],
    withheld: [],
    violence: 'safe',
  },
  {
    name: 'passed through, block, violent after a clean window',
    mode: 'block',
    source: () => iterate(nativeEvents(`${CLEAN}. ${CLEAN}. ${VIOLENT}`)),
    blocked: true,
    // The first window (32 characters) passed its check; the second holds the threat.
    released: [`${CLEAN}. ${CLEAN}. `.slice(0, 32)],
    withheld: ['kill', 'gun'],
    violence: 'high',
  },
];

describe('safeResponseEvents', () => {
  it.each(CASES)('$name', async (c) => {
    const outcome = newSafetyOutcome();
    let aborted = 0;
    let completed: JsonObject | undefined;
    const prompt = contentFilterEntry(
      'prompt',
      { results: {}, flagged: [], blocked: false, findings: { harm: {}, detected: {} } },
      5,
    );
    const out: JsonObject[] = [];
    let wire = '';
    for await (const e of safeResponseEvents(c.source(), {
      active: active(c.mode),
      outcome,
      metrics: new Metrics(),
      windowChars: 32,
      prompt,
      onComplete: (r) => {
        completed = r;
      },
      abort: () => {
        aborted++;
      },
    })) {
      wire += e.data;
      const data = JSON.parse(e.data) as JsonObject;
      expect(e.event).toBe(data.type);
      assertOpenAISchema(EVENT_SCHEMAS[String(data.type)] ?? 'missing', data);
      out.push(data);
    }
    // Consecutive sequence numbers, whatever was held or dropped.
    expect(out.map((e) => e.sequence_number)).toEqual(out.map((_, i) => i));
    const last = out[out.length - 1] as JsonObject;
    const response = last.response as JsonObject;
    expect(completed).toEqual(response);
    const filters = response.content_filters as JsonObject[];
    expect(filters.map((f) => f.source_type)).toEqual(['prompt', 'completion']);
    const completion = filters[1] as JsonObject;
    const results = completion.content_filter_results as Record<string, JsonObject>;
    expect(results.violence?.severity).toBe(c.violence);
    expect(completion.blocked).toBe(c.blocked);
    expect(results.violence?.filtered).toBe(c.blocked);
    expect(outcome.blocked).toBe(c.blocked);
    if (c.violence !== 'safe') expect([...outcome.flagged]).toContain('violence');
    for (const text of c.withheld) expect(wire).not.toContain(text);
    const deltas = out
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    for (const text of c.released) expect(deltas).toContain(text);
    if (c.blocked) {
      expect(aborted).toBe(1);
      // Every item announced is closed before the end, as OpenAI closes those of an incomplete Response.
      const added = out.filter((e) => e.type === 'response.output_item.added').map((e) => e.output_index);
      const done = out.filter((e) => e.type === 'response.output_item.done').map((e) => e.output_index);
      expect(done).toEqual(added);
      expect(last.type).toBe('response.incomplete');
      expect(response.status).toBe('incomplete');
      expect(response.incomplete_details).toEqual({ reason: 'content_filter' });
      // What the client's accumulator holds is what the final Response says.
      const text = (response.output as JsonObject[])
        .flatMap((i) => (Array.isArray(i.content) ? (i.content as JsonObject[]) : []))
        .map((p) => p.text)
        .join('');
      expect(text).toBe(deltas);
    } else {
      expect(aborted).toBe(0);
      expect(last.type).toBe('response.completed');
      expect(completion.content_filter_offsets).toEqual({
        start_offset: 0,
        end_offset: c.released.join('').length,
        check_offset: c.released.join('').length,
      });
    }
  });
});

describe('safeResponseEvents, edges', () => {
  const run = async (events: SseEvent[], mode: 'annotate' | 'block') => {
    const out: JsonObject[] = [];
    for await (const e of safeResponseEvents(iterate(events), {
      active: active(mode),
      outcome: newSafetyOutcome(),
      metrics: new Metrics(),
      windowChars: 32,
      prompt: contentFilterEntry(
        'prompt',
        { results: {}, flagged: [], blocked: false, findings: undefined },
        0,
      ),
      abort: () => {},
    })) {
      out.push(JSON.parse(e.data) as JsonObject);
    }
    return out;
  };

  it('block: an empty delta keeps its place among the events', async () => {
    // An answer with no text but one empty delta, straight before the done events.
    const events = nativeEvents('');
    const at = events.findIndex((e) => e.event === 'response.output_text.done');
    const where = { item_id: 'msg_native1', output_index: 0, content_index: 0 };
    events.splice(at, 0, {
      event: 'response.output_text.delta',
      data: JSON.stringify({ type: 'response.output_text.delta', ...where, delta: '', logprobs: [] }),
    });
    const out = await run(events, 'block');
    expect(out.map((e) => e.type)).toEqual(events.map((e) => e.event));
    expect(out.map((e) => e.sequence_number)).toEqual(out.map((_, i) => i));
  });

  it('block: a stream cut after clean text releases it once checked; a cut after flagged text releases nothing of it', async () => {
    const clean = nativeEvents(CLEAN).filter(
      (e) => !e.event?.endsWith('.done') && e.event !== 'response.completed',
    );
    const cleanOut = await run(clean, 'block');
    expect(
      cleanOut
        .filter((e) => e.type === 'response.output_text.delta')
        .map((e) => e.delta)
        .join(''),
    ).toBe(CLEAN);
    const violent = nativeEvents(VIOLENT).filter(
      (e) => !e.event?.endsWith('.done') && e.event !== 'response.completed',
    );
    const violentOut = await run(violent, 'block');
    expect(JSON.stringify(violentOut)).not.toContain('kill');
    expect(violentOut.at(-1)?.type).toBe('response.incomplete');
  });

  it('a malformed event: annotate passes it on untouched; block ends the stream (UPSTREAM_ERROR), releasing nothing held', async () => {
    const events: SseEvent[] = [...nativeEvents(VIOLENT)];
    const at = events.findIndex((e) => e.event === 'response.output_text.delta');
    events.splice(at + 2, 0, { event: 'response.output_text.delta', data: '{"broken": ' });
    const options = (mode: 'annotate' | 'block') => ({
      active: active(mode),
      outcome: newSafetyOutcome(),
      metrics: new Metrics(),
      windowChars: 1000,
      prompt: contentFilterEntry(
        'prompt',
        { results: {}, flagged: [], blocked: false, findings: undefined },
        0,
      ),
      abort: () => {},
    });
    const annotated: string[] = [];
    for await (const e of safeResponseEvents(iterate(events), options('annotate'))) annotated.push(e.data);
    expect(annotated).toContain('{"broken": ');

    const blocked: string[] = [];
    let error: unknown;
    try {
      for await (const e of safeResponseEvents(iterate(events), options('block'))) blocked.push(e.data);
    } catch (err) {
      error = err;
    }
    expect((error as { errorId?: string }).errorId).toBe('UPSTREAM_ERROR');
    expect(blocked).not.toContain('{"broken": ');
    // The deltas before it were held (their window not checked yet) and are not released either.
    expect(blocked.map((d) => JSON.parse(d).type)).not.toContain('response.output_text.delta');
  });
});

describe('textDelta: output_text deltas read without parsing', () => {
  /** A delta event in the bridge's (and OpenAI's) member order. */
  const usual = (delta: string, output = 0, content = 0, extra = '') =>
    `{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":${output},` +
    `"content_index":${content},"delta":${JSON.stringify(delta)},"logprobs":[]${extra}}`;
  const parsed = (data: string) => {
    const e = JSON.parse(data) as { output_index: number; content_index: number; delta: string };
    return { output: e.output_index, content: e.content_index, delta: e.delta };
  };

  it.each([
    'plain words',
    'quote " backslash \\ slash /',
    'line\nbreak\ttab',
    'é ü 🙂',
    '\u0000\u001f',
    '","logprobs":[]}',
    '',
  ])('reads %j as JSON.parse does', (delta) => {
    for (const data of [usual(delta), usual(delta, 2, 1), usual(delta, 0, 0, ',"obfuscation":"Zx9_"')]) {
      expect(textDelta(data)).toEqual(parsed(data));
    }
  });

  it.each([
    ['another member order', nativeEvents('Hello there').find((e) => e.data.includes('.delta"'))?.data ?? ''],
    ['logprobs given', usual('x').replace('"logprobs":[]', '"logprobs":[{"token":"x","logprob":0}]')],
    ['another member', usual('x', 0, 0, ',"extra":1')],
    ['spaces', usual('x').replace('"delta":', '"delta": ')],
    ['trailing text', `${usual('x')} `],
    ['a raw control character', usual('x').replace('"delta":"x"', '"delta":"a\tb"')],
    ['an invalid escape', usual('x').replace('"delta":"x"', '"delta":"a\\qb"')],
    ['another event', usual('x').replace('output_text.delta', 'refusal.delta')],
  ])('leaves %s to the parser', (_name, data) => {
    expect(data).not.toBe('');
    expect(textDelta(data)).toBeUndefined();
  });

  it('annotate: the same text in either layout gets the same content_filters', async () => {
    const said = `${CLEAN}, "quoted" \\ 🙂 é.\n${VIOLENT}. ${CLEAN}.`;
    const native = nativeEvents(said);
    // The same events with the deltas written in the usual member order (the bridge's and OpenAI's).
    const reordered = native.map((e, i) => {
      const data = JSON.parse(e.data) as JsonObject;
      if (data.type !== 'response.output_text.delta') return e;
      return {
        event: e.event,
        data: usual(String(data.delta)).replace('"sequence_number":7', `"sequence_number":${i}`),
      };
    });
    expect(reordered.filter((e) => textDelta(e.data) !== undefined).length).toBe(words(said).length);
    const filters = async (events: SseEvent[]) => {
      let completed: JsonObject | undefined;
      const outcome = newSafetyOutcome();
      for await (const _ of safeResponseEvents(iterate(events), {
        active: active('annotate'),
        outcome,
        metrics: new Metrics(),
        windowChars: 32,
        prompt: contentFilterEntry(
          'prompt',
          { results: {}, flagged: [], blocked: false, findings: undefined },
          0,
        ),
        onComplete: (r) => {
          completed = r;
        },
        abort: () => {},
      })) {
        // drained
      }
      return { filters: completed?.content_filters, flagged: [...outcome.flagged] };
    };
    const a = await filters(reordered);
    expect(a).toEqual(await filters(native));
    expect(a.flagged).toContain('violence');
    expect((a.filters as JsonObject[])[1]).toMatchObject({
      content_filter_offsets: { start_offset: 0, end_offset: said.length, check_offset: said.length },
    });
  });
});
