/**
 * safeChatStream (src/safety/chat-stream.ts) on scripted upstream chunks, with the real offline
 * classifier: what goes out, in which order, in annotate and block mode.
 */
import { describe, expect, it } from 'vitest';
import type { SseEvent } from '../../providers/types.js';
import { Metrics } from '../../src/metrics.js';
import type { ChatSafetyContext } from '../../src/safety/chat.js';
import { chatSafetyContext, checkChatPrompt } from '../../src/safety/chat.js';
import { choiceText, safeChatStream, simpleChoice, sliceDelta } from '../../src/safety/chat-stream.js';
import { type ActiveSafety, newSafetyOutcome } from '../../src/safety/engine.js';
import { offlineClassifier } from '../../src/safety/offline/index.js';
import { PRESET_POLICIES } from '../../src/safety/policy.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

/** The violent test phrase is a credible threat: medium or high, over the default threshold either way. */
const AT_LEAST_MEDIUM = expect.stringMatching(/^(medium|high)$/);

const VIOLENT = 'I am going to kill you, I know where you live and I have a gun';
const CLEAN = 'Have a lovely day';

type Chunk = Record<string, unknown> & { choices: Array<Record<string, unknown>> };

const head = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'm' };

function chunk(choices: Array<Record<string, unknown>>, extra: Record<string, unknown> = {}): SseEvent {
  return { data: JSON.stringify({ ...head, choices, ...extra }) };
}
const role = (index = 0) =>
  chunk([{ index, delta: { role: 'assistant', content: '' }, finish_reason: null }]);
const text = (content: string, index = 0) => chunk([{ index, delta: { content }, finish_reason: null }]);
const args = (piece: string, index = 0) =>
  chunk([
    { index, delta: { tool_calls: [{ index: 0, function: { arguments: piece } }] }, finish_reason: null },
  ]);
const finish = (reason = 'stop', index = 0) => chunk([{ index, delta: {}, finish_reason: reason }]);
const usage = () => chunk([], { usage: { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 } });
/** Words one chunk each, as upstreams stream them. */
const words = (t: string, index = 0) => (t.match(/\s*\S+/g) ?? []).map((w) => text(w, index));

async function* upstream(events: SseEvent[], state: { closed: boolean; read: number }) {
  try {
    for (const e of events) {
      state.read++;
      yield e;
    }
  } finally {
    state.closed = true;
  }
}

interface Run {
  out: Chunk[];
  raw: string;
  aborted: boolean;
  upstreamRead: number;
  closed: boolean;
  ctx: ChatSafetyContext;
}

async function run(
  mode: 'annotate' | 'block',
  events: SseEvent[],
  options: { window?: number; prompt?: string } = {},
): Promise<Run> {
  const active: ActiveSafety = {
    policy: PRESET_POLICIES[mode] as ActiveSafety['policy'],
    classifier: offlineClassifier(),
    onFailure: 'open',
  };
  const ctx = chatSafetyContext(active, newSafetyOutcome(), new Metrics({ processMetrics: false }));
  const prompt = checkChatPrompt(ctx, [{ role: 'user', content: options.prompt ?? CLEAN }], 0);
  // Ready before the upstream's first chunk, as an offline check is in Gantry (the upstream is a network away).
  await prompt;
  const state = { closed: false, read: 0 };
  let aborted = false;
  const out: Chunk[] = [];
  let raw = '';
  for await (const event of safeChatStream(upstream(events, state), {
    ctx,
    windowChars: options.window ?? 20,
    prompt,
    deliveredUsage: () => ({ prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 }),
    abort: () => {
      aborted = true;
    },
  })) {
    raw += event.data;
    const parsed = JSON.parse(event.data) as Chunk;
    assertOpenAISchema('CreateChatCompletionStreamResponse', parsed);
    out.push(parsed);
  }
  return { out, raw, aborted, upstreamRead: state.read, closed: state.closed, ctx };
}

/** The completion text the client got for one choice. */
function delivered(out: Chunk[], index = 0): string {
  let t = '';
  for (const c of out) {
    for (const ch of c.choices) {
      if (ch.index !== index) continue;
      const d = ch.delta as { content?: string; tool_calls?: Array<{ function?: { arguments?: string } }> };
      if (typeof d.content === 'string') t += d.content;
      for (const call of d.tool_calls ?? []) t += call.function?.arguments ?? '';
    }
  }
  return t;
}

const annotationsOf = (out: Chunk[], index = 0) =>
  out.filter((c) => c.choices.some((ch) => ch.index === index && 'content_filter_offsets' in ch));

const LONG_CLEAN = `${CLEAN}, and thank you for the lovely flowers you sent last week.`;

describe('safeChatStream', () => {
  const cases: Array<{
    name: string;
    mode: 'annotate' | 'block';
    events: SseEvent[];
    window?: number;
    /** The text the client must get (choice 0), exactly. */
    text: string;
    /** The finish reason the client sees last for choice 0. */
    finish: string;
    /** The upstream was stopped (block mode, flagged). */
    aborted: boolean;
    flagged: boolean;
  }> = [
    {
      name: 'annotate, clean: everything, annotated',
      mode: 'annotate',
      events: [role(), ...words(LONG_CLEAN), finish(), usage()],
      text: LONG_CLEAN,
      finish: 'stop',
      aborted: false,
      flagged: false,
    },
    {
      name: 'annotate, violent: nothing held back, the violence annotated',
      mode: 'annotate',
      events: [role(), ...words(`${CLEAN}. ${VIOLENT}.`), finish(), usage()],
      text: `${CLEAN}. ${VIOLENT}.`,
      finish: 'stop',
      aborted: false,
      flagged: true,
    },
    {
      name: 'block, clean: everything, in order',
      mode: 'block',
      events: [role(), ...words(LONG_CLEAN), finish(), usage()],
      text: LONG_CLEAN,
      finish: 'stop',
      aborted: false,
      flagged: false,
    },
    {
      name: 'block, violent after clean windows: the clean windows only, then content_filter',
      mode: 'block',
      window: 20,
      events: [role(), ...words(`${LONG_CLEAN} ${VIOLENT}. ${LONG_CLEAN}`), finish(), usage()],
      // Windows end at sentences: the clean sentence passes; the threat's whole sentence is withheld.
      text: 'Have a lovely day, and thank you for the lovely flowers you sent last week.',
      finish: 'content_filter',
      aborted: true,
      flagged: true,
    },
    {
      name: 'block, violent tool call arguments: filtered',
      mode: 'block',
      events: [role(), args('{"say":'), args(` "${VIOLENT}"}`), finish('tool_calls'), usage()],
      text: '',
      finish: 'content_filter',
      aborted: true,
      flagged: true,
    },
    {
      name: 'block, violent last window (shorter than a window): checked at the finish chunk',
      mode: 'block',
      window: 1000,
      events: [role(), ...words(VIOLENT), finish(), usage()],
      text: '',
      finish: 'content_filter',
      aborted: true,
      flagged: true,
    },
  ];

  for (const c of cases) {
    it(c.name, async () => {
      const r = await run(c.mode, c.events, { window: c.window ?? 20 });
      // The prompt's results come first.
      expect(r.out[0]?.choices).toEqual([]);
      expect(r.out[0]?.prompt_filter_results).toEqual([
        expect.objectContaining({ prompt_index: 0, content_filter_results: expect.any(Object) }),
      ]);
      expect(r.out[0]?.id).toBe(head.id);
      expect(delivered(r.out)).toBe(c.text);
      const finishes = r.out
        .flatMap((o) => o.choices.map((ch) => ch.finish_reason))
        .filter((f) => f !== null);
      expect(finishes.at(-1)).toBe(c.finish);
      expect(r.aborted).toBe(c.aborted);
      expect(r.closed).toBe(true);
      expect(r.ctx.outcome.blocked).toBe(c.mode === 'block' && c.flagged);
      expect(r.ctx.outcome.flagged.has('violence')).toBe(c.flagged);
      if (c.mode === 'block') expect(r.raw).not.toContain('kill');
      // The last chunk is the usage chunk (the upstream's, or the delivered usage of a filtered stream).
      expect(r.out.at(-1)?.usage).toBeDefined();

      // Annotations: contiguous windows over what the client got, each after the text it covers.
      let seen = '';
      let next = 0;
      for (const o of r.out) {
        for (const ch of o.choices) {
          const off = ch.content_filter_offsets as
            | { check_offset: number; start_offset: number; end_offset: number }
            | undefined;
          if (off === undefined) {
            seen += delivered([o]);
            continue;
          }
          expect(off.start_offset).toBe(next);
          // Azure: how far the text was fully checked, non-decreasing, below every later end_offset.
          expect(off.check_offset).toBe(off.end_offset);
          expect(off.end_offset).toBeGreaterThan(next);
          next = off.end_offset;
          if (ch.finish_reason !== 'content_filter')
            expect(seen.length).toBeGreaterThanOrEqual(off.end_offset);
          expect(ch.content_filter_results).toHaveProperty('violence');
        }
      }
      if (c.finish !== 'content_filter') expect(next).toBe(c.text.length);
      expect(annotationsOf(r.out).length).toBeGreaterThan(0);
      if (c.aborted) expect(r.upstreamRead).toBeLessThan(c.events.length);
    });
  }

  it('annotate: the flagged window says so, unfiltered', async () => {
    const r = await run('annotate', [role(), ...words(`${CLEAN}. ${VIOLENT}.`), finish()], { window: 1000 });
    const [annotation] = annotationsOf(r.out);
    expect(annotation?.choices[0]?.content_filter_results).toMatchObject({
      violence: { filtered: false, severity: AT_LEAST_MEDIUM },
    });
  });

  it('block, n = 2: a flagged choice ends alone, the other goes on to its end, then the upstream stops', async () => {
    const events = [
      role(0),
      role(1),
      ...words(VIOLENT, 0),
      ...words(LONG_CLEAN, 1),
      finish('stop', 0),
      finish('stop', 1),
      usage(),
    ];
    const r = await run('block', events, { window: 1000 });
    expect(delivered(r.out, 0)).toBe('');
    expect(delivered(r.out, 1)).toBe(LONG_CLEAN);
    // Both choices are over once choice 1 finished: the upstream's own usage chunk is not waited for.
    expect(r.aborted).toBe(true);
    expect(r.out.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 2 } });
    const last = (i: number) =>
      r.out.flatMap((o) => o.choices.filter((ch) => ch.index === i && ch.finish_reason !== null)).at(-1);
    expect(last(0)?.finish_reason).toBe('content_filter');
    expect(last(1)?.finish_reason).toBe('stop');
  });

  it('block, a chunk with two choices is held per choice', async () => {
    const both = chunk([
      { index: 0, delta: { content: VIOLENT }, finish_reason: 'stop' },
      { index: 1, delta: { content: CLEAN }, finish_reason: 'stop' },
    ]);
    const r = await run('block', [both, usage()], { window: 1000 });
    expect(delivered(r.out, 0)).toBe('');
    expect(delivered(r.out, 1)).toBe(CLEAN);
    expect(r.raw).not.toContain('kill');
  });

  it('annotate, a prompt check still running: its results come before the end', async () => {
    const active: ActiveSafety = {
      policy: PRESET_POLICIES.annotate as ActiveSafety['policy'],
      classifier: offlineClassifier(),
      onFailure: 'open',
    };
    const ctx = chatSafetyContext(active, newSafetyOutcome(), new Metrics({ processMetrics: false }));
    let resolve: (() => void) | undefined;
    const gate = new Promise<void>((r) => {
      resolve = r;
    });
    const prompt = gate.then(() => checkChatPrompt(ctx, [{ role: 'user', content: 'fuck' }], 0));
    const out: Chunk[] = [];
    const state = { closed: false, read: 0 };
    for await (const e of safeChatStream(upstream([role(), ...words(CLEAN), finish()], state), {
      ctx,
      windowChars: 1000,
      prompt,
      deliveredUsage: () => ({}),
      abort: () => undefined,
    })) {
      out.push(JSON.parse(e.data) as Chunk);
      if (out.length === 2) resolve?.();
    }
    const at = out.findIndex((o) => o.prompt_filter_results !== undefined);
    expect(at).toBeGreaterThan(0);
    expect(delivered(out)).toBe(CLEAN);
    expect(out[at]?.prompt_filter_results).toEqual([
      {
        prompt_index: 0,
        content_filter_results: expect.objectContaining({ profanity: { filtered: false, detected: true } }),
      },
    ]);
  });
});

describe('safeChatStream: reasoning, unreadable chunks, failures', () => {
  const reasoning = (piece: string, index = 0) =>
    chunk([{ index, delta: { reasoning_content: piece }, finish_reason: null }]);

  it('block: violent reasoning is held and filtered like content', async () => {
    const r = await run(
      'block',
      [
        role(),
        ...words(VIOLENT).map((e) => reasoning(JSON.parse(e.data).choices[0].delta.content)),
        text(CLEAN),
        finish(),
        usage(),
      ],
      { window: 1000 },
    );
    expect(r.raw).not.toContain('kill');
    const ends = r.out.flatMap((o) => o.choices).filter((ch) => ch.finish_reason !== null);
    expect(ends.map((e) => e.finish_reason)).toEqual(['content_filter']);
    expect(r.ctx.outcome.flagged.has('violence')).toBe(true);
  });

  it('annotate: reasoning is annotated (the text still goes out)', async () => {
    const r = await run('annotate', [role(), reasoning(VIOLENT), text(CLEAN), finish(), usage()], {
      window: 1000,
    });
    expect(r.raw).toContain('kill');
    const [annotation] = annotationsOf(r.out);
    expect(annotation?.choices[0]?.content_filter_results).toMatchObject({
      violence: { filtered: false, severity: AT_LEAST_MEDIUM },
    });
    // The window covers the reasoning and the content together.
    expect(annotation?.choices[0]?.content_filter_offsets).toEqual({
      check_offset: VIOLENT.length + CLEAN.length,
      start_offset: 0,
      end_offset: VIOLENT.length + CLEAN.length,
    });
  });

  it('block: a chunk that is not JSON is never forwarded; the stream ends with an error, held text kept', async () => {
    const broken = { data: `{"choices":[{"index":0,"delta":{"content":"${VIOLENT}"}}], broken` };
    const events = [role(), text(CLEAN), broken, finish(), usage()];
    const out: string[] = [];
    const ctx = chatSafetyContext(
      {
        policy: PRESET_POLICIES.block as ActiveSafety['policy'],
        classifier: offlineClassifier(),
        onFailure: 'open',
      },
      newSafetyOutcome(),
      new Metrics({ processMetrics: false }),
    );
    const prompt = checkChatPrompt(ctx, [{ role: 'user', content: CLEAN }], 0);
    await prompt;
    const state = { closed: false, read: 0 };
    let error: unknown;
    try {
      for await (const e of safeChatStream(upstream(events, state), {
        ctx,
        windowChars: 1000,
        prompt,
        deliveredUsage: () => ({}),
        abort: () => undefined,
      })) {
        out.push(e.data);
      }
    } catch (err) {
      error = err;
    }
    expect((error as { errorId?: string }).errorId).toBe('UPSTREAM_ERROR');
    expect(out.join('')).not.toContain('kill');
    // The clean text before it was held (its window not checked yet) and is not released either.
    expect(out.join('')).not.toContain(CLEAN);
    expect(state.closed).toBe(true);
  });

  it('annotate: a chunk that is not JSON goes out as it came (nothing is held in annotate)', async () => {
    const broken = { data: '{"choices": oops' };
    const active: ActiveSafety = {
      policy: PRESET_POLICIES.annotate as ActiveSafety['policy'],
      classifier: offlineClassifier(),
      onFailure: 'open',
    };
    const ctx = chatSafetyContext(active, newSafetyOutcome(), new Metrics({ processMetrics: false }));
    const prompt = checkChatPrompt(ctx, [{ role: 'user', content: CLEAN }], 0);
    await prompt;
    const out: string[] = [];
    for await (const e of safeChatStream(upstream([role(), broken, finish()], { closed: false, read: 0 }), {
      ctx,
      windowChars: 1000,
      prompt,
      deliveredUsage: () => ({}),
      abort: () => undefined,
    })) {
      out.push(e.data);
    }
    expect(out).toContain(broken.data);
  });

  it('block: a chunk with two choices and usage is split with the usage on one part only', async () => {
    const both = chunk(
      [
        { index: 0, delta: { content: CLEAN }, finish_reason: 'stop' },
        { index: 1, delta: { content: CLEAN }, finish_reason: 'stop' },
      ],
      { usage: { prompt_tokens: 3, completion_tokens: 8, total_tokens: 11 } },
    );
    const r = await run('block', [both], { window: 1000 });
    expect(delivered(r.out, 0)).toBe(CLEAN);
    expect(delivered(r.out, 1)).toBe(CLEAN);
    expect(r.out.filter((o) => o.usage !== undefined && o.usage !== null)).toHaveLength(1);
  });
});

/** A chunk as OpenAI writes it (compact, its key order, `"usage":null` when usage was asked for). */
function wire(choice: string, index = 0): SseEvent {
  return {
    data:
      '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m",' +
      `"service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":${index},${choice}}],"usage":null}`,
  };
}
const wireText = (content: string, index = 0) =>
  wire(`"delta":{"content":${JSON.stringify(content)}},"logprobs":null,"finish_reason":null`, index);
const wireFinish = (reason = 'stop', index = 0) =>
  wire(`"delta":{},"logprobs":null,"finish_reason":"${reason}"`, index);
const wireRole = () =>
  wire('"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null');

describe('simpleChoice: OpenAI chunks read without parsing', () => {
  /** What the stream reads from a parsed chunk: the one choice's index, text and finish reason. */
  const parsed = (data: string) => {
    const choice = (JSON.parse(data) as Chunk).choices[0] as Record<string, unknown>;
    return {
      index: choice.index,
      text: choiceText(choice.delta),
      finish: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
    };
  };

  it.each([
    'plain words',
    ' leading space',
    'quote " and backslash \\ and slash /',
    'line\nbreak\ttab\r',
    'accents é ü and emoji 🙂 (a surrogate pair)',
    '\u0000 \u001f control characters, escaped',
    '"choices":[{"index":9,"delta":{"content":"not this"}}]',
    '\\"',
    '\\',
  ])('reads %j as JSON.parse does', (content) => {
    for (const event of [wireText(content), wireText(content, 3)]) {
      expect(simpleChoice(event.data)).toEqual(parsed(event.data));
    }
  });

  it('reads an escaped unicode literal as JSON.parse does', () => {
    const data = wireText('x').data.replace('"content":"x"', '"content":"caf\\u00e9 \\ud83d\\ude42"');
    expect(simpleChoice(data)).toEqual({ index: 0, text: 'café 🙂', finish: null });
    expect(simpleChoice(data)).toEqual(parsed(data));
  });

  it('reads finish chunks and empty deltas', () => {
    for (const event of [wireFinish('stop'), wireFinish('length', 2), wireFinish('content_filter')]) {
      expect(simpleChoice(event.data)).toEqual(parsed(event.data));
    }
    const empty = wire('"delta":{},"logprobs":null,"finish_reason":null');
    expect(simpleChoice(empty.data)).toEqual({ index: 0, text: '', finish: null });
  });

  it.each([
    ['another layout (spaces)', text('x').data.replace('"choices":', '"choices": ')],
    ['no logprobs member', text('x').data],
    ['a role chunk', wireRole().data],
    ['a usage chunk', chunk([], { usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }).data],
    ['two choices', wireText('a').data.replace('}],"usage"', '},{"index":1,"delta":{}}],"usage"')],
    ['choices twice (the parser keeps the last)', `${wireText('a').data.slice(0, -1)},"choices":[]}`],
    ['trailing text', `${wireText('a').data} x`],
    ['a raw control character', wireText('a').data.replace('"content":"a"', '"content":"a\nb"')],
    ['an invalid escape', wireText('a').data.replace('"content":"a"', '"content":"a\\qb"')],
    ['an index with a leading zero', wireText('a').data.replace('"index":0', '"index":01')],
    ['an index of ten digits', wireText('a').data.replace('"index":0', '"index":1234567890')],
    ['content never closed', '{"choices":[{"index":0,"delta":{"content":"abc}'],
    ['a backslash at the very end', '{"choices":[{"index":0,"delta":{"content":"abc\\}'],
    ['a finish reason never closed', wireFinish().data.replace('"stop"', '"stop')],
    ['tool call arguments', wire('"delta":{"tool_calls":[]},"logprobs":null,"finish_reason":null').data],
    [
      'content and refusal',
      wire('"delta":{"content":"a","refusal":"b"},"logprobs":null,"finish_reason":null').data,
    ],
  ])('leaves %s to the parser', (_name, data) => {
    expect(simpleChoice(data)).toBeUndefined();
  });

  it('annotate: a stream in OpenAI layout is annotated exactly as the same stream in another layout', async () => {
    const said = `${LONG_CLEAN} "Quoted," she said: \\ ok.\n${VIOLENT}. ${CLEAN} 🙂 é.`;
    const pieces = said.match(/\s*\S+/g) ?? [];
    const openai = await run('annotate', [
      wireRole(),
      ...pieces.map((p) => wireText(p)),
      wireFinish(),
      usage(),
    ]);
    const other = await run('annotate', [role(), ...pieces.map((p) => text(p)), finish(), usage()]);
    const annotations = (r: Run) =>
      annotationsOf(r.out).map((o) => ({
        offsets: o.choices[0]?.content_filter_offsets,
        results: o.choices[0]?.content_filter_results,
      }));
    expect(annotations(openai).length).toBeGreaterThan(2);
    expect(annotations(openai)).toEqual(annotations(other));
    expect(annotations(openai).at(-1)?.offsets).toMatchObject({ end_offset: said.length });
    expect(openai.ctx.outcome.flagged.has('violence')).toBe(true);
    // Every upstream chunk goes out as it came, each annotation after the text it covers.
    const sent = openai.out.filter((o) => !('prompt_filter_results' in o) && !annotationsOf([o]).length);
    expect(sent.map((o) => JSON.stringify(o))).toEqual(
      [wireRole(), ...pieces.map((p) => wireText(p)), wireFinish(), usage()].map((e) =>
        JSON.stringify(JSON.parse(e.data)),
      ),
    );
  });
});

describe('safeChatStream, block: every text a delta carries is checked', () => {
  const one = (delta: Record<string, unknown>, finish_reason: string | null = null) =>
    chunk([{ index: 0, delta, finish_reason }]);
  /** Ends with content_filter, nothing of the threat out, the upstream stopped. */
  const expectFiltered = (r: Run) => {
    expect(r.raw).not.toContain('kill');
    expect(r.raw).not.toContain('gun');
    const ends = r.out.flatMap((o) => o.choices).filter((ch) => ch.finish_reason !== null);
    expect(ends.map((e) => e.finish_reason)).toEqual(['content_filter']);
    expect(r.aborted).toBe(true);
    expect(r.ctx.outcome.flagged.has('violence')).toBe(true);
  };

  it('custom tool call input (tool_calls[].custom.input) is held and filtered like function arguments', async () => {
    const r = await run('block', [
      role(),
      one({ tool_calls: [{ index: 0, id: 'call_1', custom: { name: 'say', input: '' } }] }),
      ...(VIOLENT.match(/\s*\S+/g) ?? []).map((w) =>
        one({ tool_calls: [{ index: 0, custom: { input: w } }] }),
      ),
      finish('tool_calls'),
      usage(),
    ]);
    expectFiltered(r);
  });

  it('content sent as an array of text parts is held and filtered', async () => {
    const r = await run('block', [
      role(),
      one({ content: [{ type: 'text', text: 'I am going to' }] }),
      one({ content: [{ type: 'text', text: VIOLENT.slice('I am going to'.length) }] }),
      finish(),
      usage(),
    ]);
    expectFiltered(r);
  });

  it('the audio transcript (delta.audio.transcript) is held and filtered', async () => {
    const r = await run('block', [
      role(),
      one({ audio: { id: 'audio_1', transcript: VIOLENT.slice(0, 20) } }),
      one({ audio: { id: 'audio_1', transcript: VIOLENT.slice(20) } }),
      finish(),
      usage(),
    ]);
    expectFiltered(r);
  });

  it('annotate: the same texts are annotated', async () => {
    const r = await run(
      'annotate',
      [
        role(),
        one({ tool_calls: [{ index: 0, id: 'c', custom: { name: 'say', input: VIOLENT } }] }),
        finish(),
      ],
      { window: 1000 },
    );
    const [annotation] = annotationsOf(r.out);
    expect(annotation?.choices[0]?.content_filter_results).toMatchObject({
      violence: { filtered: false, severity: AT_LEAST_MEDIUM },
    });
  });
});

describe('safeChatStream, block: a delta longer than a window is released a window at a time', () => {
  /** 2,500 characters, no sentence end inside a window: only MAX_WINDOW closes one. */
  const LONG = 'lovely flowers and tea '.repeat(109).slice(0, 2500);
  const contents = (r: Run) =>
    r.out
      .flatMap((o) => o.choices)
      .map((ch) => (ch.delta as { content?: unknown }).content)
      .filter((c): c is string => typeof c === 'string' && c !== '');

  it('one 2,500-character chunk goes out as 1,000 + 1,000 + 500, each after its own check', async () => {
    const r = await run('block', [role(), text(LONG), finish(), usage()], { window: 400 });
    expect(contents(r)).toEqual([LONG.slice(0, 1000), LONG.slice(1000, 2000), LONG.slice(2000)]);
    const offsets = annotationsOf(r.out).map((a) => a.choices[0]?.content_filter_offsets);
    expect(offsets).toEqual([
      { check_offset: 1000, start_offset: 0, end_offset: 1000 },
      { check_offset: 2000, start_offset: 1000, end_offset: 2000 },
      { check_offset: 2500, start_offset: 2000, end_offset: 2500 },
    ]);
    // Each part is followed by its annotation before the next part goes out.
    const kinds = r.out
      .filter((o) => o.choices.length > 0)
      .map((o) => {
        const ch = o.choices[0] as Record<string, unknown>;
        return 'content_filter_offsets' in ch ? 'check' : ch.finish_reason === 'stop' ? 'stop' : 'text';
      });
    expect(kinds.slice(1)).toEqual(['text', 'check', 'text', 'check', 'text', 'stop', 'check']);
    expect(r.out.flatMap((o) => o.choices).filter((ch) => ch.finish_reason === 'stop')).toHaveLength(1);
  });

  it('the windows before a threat in the same chunk are released, the threat is not', async () => {
    const chunkText = `${LONG.slice(0, 2100)}${VIOLENT}`;
    const r = await run('block', [role(), text(chunkText), finish(), usage()], { window: 400 });
    expect(contents(r)).toEqual([LONG.slice(0, 1000), LONG.slice(1000, 2000)]);
    expect(r.raw).not.toContain('kill');
    const ends = r.out.flatMap((o) => o.choices).filter((ch) => ch.finish_reason !== null);
    expect(ends.map((e) => e.finish_reason)).toEqual(['content_filter']);
  });

  it('text already waiting counts: the cut fills the window it joins', async () => {
    const r = await run('block', [role(), text('a'.repeat(300)), text(LONG), finish()], { window: 400 });
    expect(contents(r).map((c) => c.length)).toEqual([300, 700, 1000, 800]);
  });
});

describe("sliceDelta: consecutive parts of a delta's text", () => {
  const delta = {
    role: 'assistant',
    content: 'abc',
    audio: { id: 'au_1', data: 'AAAA', transcript: 'xy' },
    tool_calls: [
      { index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: 'defg' } },
      { index: 1, id: 'call_2', custom: { name: 'c', input: 'hi' } },
    ],
  };

  it('the parts carry the text in choiceText order; the first keeps the members that are not text', () => {
    expect(choiceText(delta)).toBe('abcxydefghi');
    expect(sliceDelta(delta, 0, 2, true)).toEqual({
      role: 'assistant',
      content: 'ab',
      audio: { id: 'au_1', data: 'AAAA' },
      tool_calls: [
        { index: 0, id: 'call_1', type: 'function', function: { name: 'f' } },
        { index: 1, id: 'call_2', custom: { name: 'c' } },
      ],
    });
    expect(sliceDelta(delta, 2, 7, false)).toEqual({
      content: 'c',
      audio: { id: 'au_1', transcript: 'xy' },
      tool_calls: [{ index: 0, function: { arguments: 'de' } }],
    });
    expect(sliceDelta(delta, 7, 11, false)).toEqual({
      tool_calls: [
        { index: 0, function: { arguments: 'fg' } },
        { index: 1, custom: { input: 'hi' } },
      ],
    });
  });

  it('content as text parts is cut inside its parts', () => {
    const parts = {
      content: [
        { type: 'text', text: 'abcd' },
        { type: 'text', text: 'ef' },
      ],
    };
    expect(choiceText(parts)).toBe('abcdef');
    expect(sliceDelta(parts, 0, 3, true)).toEqual({ content: [{ type: 'text', text: 'abc' }] });
    expect(sliceDelta(parts, 3, 6, false)).toEqual({
      content: [
        { type: 'text', text: 'd' },
        { type: 'text', text: 'ef' },
      ],
    });
  });
});
