/**
 * StreamMeter, the watcher every chat and Responses stream passes through on its way to the client: it
 * strips the `"usage":null` upstreams add to each chunk (Gantry always asks them for usage), drops the
 * usage chunk a client did not ask for, reads the usage, notes the first token and keeps what was
 * delivered so a stream cut short can still be metered.
 */
import { describe, expect, it } from 'vitest';
import { countCompletionTokens } from '../../providers/tokens.js';
import type { SseEvent } from '../../providers/types.js';
import { StreamMeter } from '../../src/inference/usage-capture.js';

type Json = Record<string, unknown>;

/** An OpenAI chat.completion.chunk carrying `delta`, in the upstream's key order. */
function chunk(delta: Json, extra: Json = {}): Json {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'up-model',
    system_fingerprint: 'fp_1',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: null }],
    ...extra,
  };
}

const USAGE = {
  prompt_tokens: 12,
  completion_tokens: 7,
  total_tokens: 19,
  prompt_tokens_details: { cached_tokens: 4, audio_tokens: 0, cache_write_tokens: 2 },
  completion_tokens_details: { reasoning_tokens: 0 },
};
const READ_USAGE = {
  inputTokens: 12,
  outputTokens: 7,
  cachedInputTokens: 4,
  cacheWriteInputTokens: 2,
  reported: true,
};

/** The usage chunk an upstream sends last when asked for usage: no choices. */
function usageChunk(): Json {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'up-model',
    choices: [],
    usage: USAGE,
  };
}

const ev = (value: Json | string): SseEvent => ({
  data: typeof value === 'string' ? value : JSON.stringify(value),
});

function without(value: Json, key: string): Json {
  const copy = { ...value };
  delete copy[key];
  return copy;
}

/** The event as the client gets it; fails when the meter dropped it. */
function seen(meter: StreamMeter, event: SseEvent): SseEvent {
  const out = meter.see(event);
  if (out === undefined) throw new Error(`the meter dropped ${event.data}`);
  return out;
}

describe('StreamMeter: "usage":null on every chunk', () => {
  const cases: Array<[string, string, Json]> = (() => {
    const last = chunk({ content: 'Hi' }, { usage: null });
    const { usage: _u, ...rest } = last;
    const first = { usage: null, ...rest };
    const { id, object, created, model, ...tail } = rest;
    const middle = { id, object, created, usage: null, model, ...tail };
    return [
      ['last member (the usual form)', JSON.stringify(last), last],
      ['first member', JSON.stringify(first), first],
      ['a member in the middle', JSON.stringify(middle), middle],
      ['the only member', '{"usage":null}', { usage: null }],
    ];
  })();

  for (const [where, data, parsed] of cases) {
    it(`is stripped when it is the ${where}, leaving valid JSON of the same chunk`, () => {
      const meter = new StreamMeter(false);
      expect(data).toContain('"usage":null');
      const out = seen(meter, { data });
      expect(out.data).not.toContain('"usage"');
      const expected = without(parsed, 'usage');
      expect(JSON.parse(out.data)).toEqual(expected);
      // Nothing else was touched: the text is the chunk re-serialised without the member, key order kept.
      expect(out.data).toBe(JSON.stringify(expected));
      expect(meter.usage).toBeUndefined();
    });
  }

  it('keeps the event name when it strips', () => {
    const meter = new StreamMeter(false);
    const out = seen(meter, {
      event: 'chunk',
      data: JSON.stringify(chunk({ content: 'x' }, { usage: null })),
    });
    expect(out.event).toBe('chunk');
    expect(out.data).not.toContain('"usage"');
  });

  it('is left alone when the client asked for usage', () => {
    const meter = new StreamMeter(true);
    for (const [, data] of cases) {
      const out = seen(meter, { data });
      expect(out.data).toBe(data);
    }
  });

  it('is stripped after a "usage" that is something else, which is kept', () => {
    const meter = new StreamMeter(false);
    const value = chunk({ content: 'x' }, { metadata: { usage: 'x' }, usage: null });
    const out = seen(meter, ev(value));
    expect(JSON.parse(out.data)).toEqual(without(value, 'usage'));
    expect(out.data).toContain('"usage":"x"');
    expect(meter.usage).toBeUndefined();
  });

  it('leaves a chunk without "usage" as it is (the same object)', () => {
    const meter = new StreamMeter(false);
    const event = ev(chunk({ content: 'plain' }));
    expect(meter.see(event)).toBe(event);
  });
});

describe('StreamMeter: the usage chunk', () => {
  it('drops the usage chunk (empty choices) when the client did not ask, and reads it', () => {
    const meter = new StreamMeter(false);
    expect(meter.see(ev(usageChunk()))).toBeUndefined();
    expect(meter.usage).toEqual(READ_USAGE);
  });

  it('passes the usage chunk on untouched when the client asked, and reads it', () => {
    const meter = new StreamMeter(true);
    const event = ev(usageChunk());
    const out = seen(meter, event);
    expect(out.data).toBe(event.data);
    expect(meter.usage).toEqual(READ_USAGE);
  });

  it('reads zero cached and cache-write tokens when the upstream gives no details', () => {
    const meter = new StreamMeter(false);
    meter.see(ev({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 } }));
    expect(meter.usage).toEqual({
      inputTokens: 3,
      outputTokens: 5,
      cachedInputTokens: 0,
      cacheWriteInputTokens: 0,
      reported: true,
    });
  });

  it('reads the usage of a Responses response.completed event, which it passes on', () => {
    const meter = new StreamMeter(false);
    const event: SseEvent = {
      event: 'response.completed',
      data: JSON.stringify({
        type: 'response.completed',
        sequence_number: 9,
        response: {
          id: 'resp_1',
          object: 'response',
          status: 'completed',
          output: [],
          usage: {
            input_tokens: 20,
            input_tokens_details: { cached_tokens: 3, cache_write_tokens: 6 },
            output_tokens: 11,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: 31,
          },
        },
      }),
    };
    expect(meter.see(event)).toEqual(event);
    expect(meter.usage).toEqual({
      inputTokens: 20,
      outputTokens: 11,
      cachedInputTokens: 3,
      cacheWriteInputTokens: 6,
      reported: true,
    });
  });

  it('finds the real usage object after a first "usage" key holding a string', () => {
    const value = {
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      metadata: { usage: 'x' },
      choices: [],
      usage: USAGE,
    };
    const data = JSON.stringify(value);
    // The metadata key really comes first in the text: the meter must look past it.
    expect(data.indexOf('"usage":"x"')).toBeLessThan(data.indexOf('"usage":{'));
    const dropping = new StreamMeter(false);
    expect(dropping.see({ data })).toBeUndefined();
    expect(dropping.usage).toEqual(READ_USAGE);
    const keeping = new StreamMeter(true);
    expect(seen(keeping, { data }).data).toBe(data);
    expect(keeping.usage).toEqual(READ_USAGE);
  });

  it('does not drop a chunk that has choices, even with usage in it', () => {
    const meter = new StreamMeter(false);
    const value = {
      ...chunk({}, {}),
      choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
      usage: USAGE,
    };
    const out = seen(meter, ev(value));
    expect(JSON.parse(out.data)).toMatchObject({ choices: [{ finish_reason: 'stop' }] });
    expect(meter.usage).toEqual(READ_USAGE);
  });
});

describe('StreamMeter: time to first token', () => {
  it('is undefined after a role-only chunk and set at the first chunk with content', () => {
    const meter = new StreamMeter(false);
    meter.see(ev(chunk({ role: 'assistant', content: '', refusal: null }, { usage: null })));
    expect(meter.firstTokenAt).toBeUndefined();
    meter.see(ev(chunk({ content: null, tool_calls: [] })));
    expect(meter.firstTokenAt).toBeUndefined();
    const before = performance.now();
    meter.see(ev(chunk({ content: 'Hello' }, { usage: null })));
    const after = performance.now();
    expect(meter.firstTokenAt).toBeGreaterThanOrEqual(before);
    expect(meter.firstTokenAt).toBeLessThanOrEqual(after);
  });

  it('is set at the first tool call or reasoning piece: an answer may have no content at all', () => {
    for (const delta of [
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '' } }],
      },
      { reasoning_content: 'Let me think' },
    ]) {
      const meter = new StreamMeter(false);
      meter.see(ev(chunk({ role: 'assistant', content: '' })));
      expect(meter.firstTokenAt).toBeUndefined();
      meter.see(ev(chunk(delta)));
      expect(meter.firstTokenAt).toBeDefined();
    }
    const responses = new StreamMeter(true);
    responses.see({
      event: 'response.function_call_arguments.delta',
      data: JSON.stringify({ type: 'response.function_call_arguments.delta', item_id: 'fc', delta: '{' }),
    });
    expect(responses.firstTokenAt).toBeDefined();
  });

  it('keeps the first time: later content does not move it', async () => {
    const meter = new StreamMeter(false);
    meter.see(ev(chunk({ content: 'one' })));
    const first = meter.firstTokenAt;
    expect(first).toBeDefined();
    await new Promise((resolve) => setTimeout(resolve, 5));
    meter.see(ev(chunk({ content: 'two' })));
    expect(meter.firstTokenAt).toBe(first);
  });

  it('is set at a Responses output_text delta, not before', () => {
    const meter = new StreamMeter(true);
    meter.see({
      event: 'response.created',
      data: JSON.stringify({ type: 'response.created', response: { id: 'r', status: 'in_progress' } }),
    });
    expect(meter.firstTokenAt).toBeUndefined();
    meter.see({
      event: 'response.output_text.delta',
      data: JSON.stringify({ type: 'response.output_text.delta', item_id: 'm', delta: 'Hi' }),
    });
    expect(meter.firstTokenAt).toBeTypeOf('number');
  });
});

describe('StreamMeter: what was delivered', () => {
  const pieces = ['The', ' quick', ' brown', ' fox', ' jumps', ' over', ' the', ' lazy', ' dog.'];

  it('counts the tokens of the delivered content when no usage came', () => {
    const meter = new StreamMeter(false);
    meter.see(ev(chunk({ role: 'assistant', content: '' }, { usage: null })));
    for (const piece of pieces) meter.see(ev(chunk({ content: piece }, { usage: null })));
    const expected = countCompletionTokens(pieces.join(''));
    expect(expected).toBeGreaterThan(0);
    expect(meter.countDelivered()).toBe(expected);
    expect(meter.usage).toBeUndefined();
  });

  it('counts nothing when nothing with content was delivered', () => {
    const meter = new StreamMeter(false);
    meter.see(ev(chunk({ role: 'assistant', content: '' })));
    meter.see({ data: 'not json' });
    expect(meter.countDelivered()).toBe(0);
  });

  it('counts Responses output_text deltas', () => {
    const meter = new StreamMeter(true);
    for (const piece of pieces) {
      meter.see({
        event: 'response.output_text.delta',
        data: JSON.stringify({ type: 'response.output_text.delta', delta: piece }),
      });
    }
    expect(meter.countDelivered()).toBe(countCompletionTokens(pieces.join('')));
  });

  it('stops keeping texts once the usage arrived: the usage wins', () => {
    const meter = new StreamMeter(false);
    meter.see(ev(chunk({ content: 'before' }, { usage: null })));
    expect(meter.see(ev(usageChunk()))).toBeUndefined();
    // Anything after the usage is not counted on top of it.
    const after = 'many more words that came after the usage chunk and must not be counted';
    meter.see(ev(chunk({ content: after }, { usage: null })));
    expect(meter.usage).toEqual(READ_USAGE);
    expect(meter.countDelivered()).toBe(countCompletionTokens('before'));
    expect(countCompletionTokens('before')).toBeLessThan(countCompletionTokens(`before${after}`));
  });
});

describe('StreamMeter.wrap', () => {
  /** A stream with every kind of event the meter treats differently. */
  function stream(): SseEvent[] {
    return [
      ev(chunk({ role: 'assistant', content: '' }, { usage: null })),
      ev(chunk({ content: 'Hel' }, { usage: null })),
      ev({ usage: null, ...chunk({ content: 'lo' }) }),
      ev(chunk({ content: '!' })),
      { event: 'named', data: JSON.stringify(chunk({ content: '?' }, { usage: null })) },
      ev({ ...chunk({}), choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: null }),
      ev(usageChunk()),
    ];
  }

  async function* source(events: SseEvent[]): AsyncGenerator<SseEvent> {
    for (const event of events) yield event;
  }

  async function collect(iterable: AsyncIterable<SseEvent>): Promise<SseEvent[]> {
    const out: SseEvent[] = [];
    for await (const event of iterable) out.push(event);
    return out;
  }

  for (const clientWantsUsage of [false, true]) {
    it(`yields what see() returns for each event (clientWantsUsage=${clientWantsUsage})`, async () => {
      const byHand = new StreamMeter(clientWantsUsage);
      const expected = stream()
        .map((event) => byHand.see(event))
        .filter((event): event is SseEvent => event !== undefined);
      const wrapped = new StreamMeter(clientWantsUsage);
      const got = await collect(wrapped.wrap(source(stream())));
      expect(got).toEqual(expected);
      expect(wrapped.usage).toEqual(READ_USAGE);
      expect(wrapped.firstTokenAt).toBeTypeOf('number');
      if (clientWantsUsage) {
        expect(got).toEqual(stream());
      } else {
        // The comparison means something: one event was dropped and the others lost their usage:null.
        expect(got).toHaveLength(stream().length - 1);
        for (const event of got) expect(event.data).not.toContain('"usage"');
        expect(got[4]?.event).toBe('named');
      }
    });
  }
});

/** JSON as Python's json.dumps writes it by default: a space after every colon and comma. */
function spaced(value: Json): string {
  return JSON.stringify(value).replace(/([,:])(?=["{[\dntf-])/g, '$1 ');
}

describe('StreamMeter: upstreams that write JSON with spaces', () => {
  it('the helper writes spaced JSON that parses to the same value', () => {
    const value = chunk({ content: 'Hi' }, { usage: null });
    expect(spaced(value)).toContain('"usage": null');
    expect(JSON.parse(spaced(value))).toEqual(value);
  });

  it('strips "usage": null and leaves valid JSON of the same chunk', () => {
    for (const value of [
      chunk({ content: 'Hi' }, { usage: null }),
      { usage: null, ...chunk({ content: 'Hi' }) },
    ]) {
      const out = seen(new StreamMeter(false), { data: spaced(value) });
      expect(out.data).not.toContain('usage');
      expect(JSON.parse(out.data)).toEqual(without(value, 'usage'));
    }
  });

  it('reads a spaced usage chunk and drops it when the client did not ask', () => {
    const meter = new StreamMeter(false);
    expect(meter.see({ data: spaced(usageChunk()) })).toBeUndefined();
    expect(meter.usage).toEqual(READ_USAGE);
  });

  it('notes the first token of spaced content, not of a spaced role-only chunk', () => {
    const meter = new StreamMeter(true);
    meter.see({ data: spaced(chunk({ role: 'assistant', content: '' })) });
    expect(meter.firstTokenAt).toBeUndefined();
    meter.see({ data: spaced(chunk({ content: 'Hi' })) });
    expect(meter.firstTokenAt).toBeTypeOf('number');
  });
});

describe('StreamMeter: a long stream cut before its usage', () => {
  it('counts all its content while keeping only a bounded amount of event text', () => {
    const meter = new StreamMeter(false);
    const pieces: string[] = [];
    // About 1.5 MB of chunks: several times what the meter keeps before reducing them to their content.
    for (let i = 0; i < 6_000; i++) {
      const piece = ` word${i % 97}`;
      pieces.push(piece);
      seen(meter, { data: JSON.stringify(chunk({ content: piece }, { usage: null })) });
    }
    const kept = (meter as unknown as { delivered: string[] }).delivered;
    expect(kept.length).toBeLessThan(2_000);
    expect(meter.countDelivered()).toBe(countCompletionTokens(pieces.join('')));
  });
});
