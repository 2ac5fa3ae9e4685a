import { describe, expect, it } from 'vitest';
import { formatSse, parseSse } from '../../providers/sse.js';
import type { SseEvent } from '../../providers/types.js';

async function collect(chunks: (Uint8Array | string)[]): Promise<SseEvent[]> {
  async function* source(): AsyncGenerator<Uint8Array | string> {
    for (const chunk of chunks) yield chunk;
  }
  const events: SseEvent[] = [];
  for await (const event of parseSse(source())) events.push(event);
  return events;
}

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

/** The same stream with the given line end; the text after the last event is an unterminated one. */
function sample(eol: string): string {
  return [
    ': a comment, ignored',
    'event: response.created',
    'data: {"text":"héllo wörld 🌍 — 日本"}',
    '',
    'data: line one',
    'data:line two',
    'data:  two spaces keep one',
    'id: 7',
    'retry: 1000',
    '',
    'event: ignored because no data',
    '',
    'data: [DONE]',
    '',
    'data: unterminated',
  ].join(eol);
}

const expected: SseEvent[] = [
  { event: 'response.created', data: '{"text":"héllo wörld 🌍 — 日本"}' },
  { data: 'line one\nline two\n two spaces keep one' },
  { data: '[DONE]' },
];

describe('parseSse', () => {
  it.each([
    ['LF', '\n'],
    ['CRLF', '\r\n'],
    ['CR', '\r'],
  ])('parses %s line ends in one chunk', async (_name, eol) => {
    expect(await collect([sample(eol)])).toEqual(expected);
    expect(await collect([bytes(sample(eol))])).toEqual(expected);
  });

  it.each([
    ['LF', '\n'],
    ['CRLF', '\r\n'],
    ['CR', '\r'],
  ])('gives the same events for %s split at every byte position', async (_name, eol) => {
    const all = bytes(sample(eol));
    for (let i = 0; i <= all.length; i++) {
      const events = await collect([all.subarray(0, i), all.subarray(i)]);
      expect(events, `split at byte ${i}`).toEqual(expected);
    }
  });

  it('gives the same events for CRLF text split at every character (including between CR and LF)', async () => {
    const text = sample('\r\n');
    let crlfSplits = 0;
    for (let i = 0; i <= text.length; i++) {
      if (text[i - 1] === '\r' && text[i] === '\n') crlfSplits++;
      const events = await collect([text.slice(0, i), text.slice(i)]);
      expect(events, `split at char ${i}`).toEqual(expected);
    }
    expect(crlfSplits).toBeGreaterThan(5);
  });

  it('survives three-way splits and one-byte chunks', async () => {
    const all = bytes(sample('\r\n'));
    for (let i = 0; i <= all.length; i += 3) {
      for (let j = i; j <= all.length; j += 5) {
        const events = await collect([all.subarray(0, i), all.subarray(i, j), all.subarray(j)]);
        expect(events, `split at ${i} and ${j}`).toEqual(expected);
      }
    }
    const single = Array.from(all, (b) => Uint8Array.of(b));
    expect(await collect(single)).toEqual(expected);
  });

  it('decodes multi-byte UTF-8 characters split across chunks', async () => {
    const all = bytes('data: 🌍é日\n\n');
    const globe = all.indexOf(0xf0);
    // Cut inside the 4-byte emoji after each of its first three bytes.
    for (const cut of [globe + 1, globe + 2, globe + 3]) {
      expect(await collect([all.subarray(0, cut), all.subarray(cut)])).toEqual([{ data: '🌍é日' }]);
    }
  });

  it('drops an unterminated last event', async () => {
    expect(await collect(['data: complete\n\ndata: cut off\n'])).toEqual([{ data: 'complete' }]);
    expect(await collect(['data: complete\n\ndata: cut off'])).toEqual([{ data: 'complete' }]);
    expect(await collect(['event: x\ndata: cut off\r\n'])).toEqual([]);
  });

  it('does not carry an event name over to the next event', async () => {
    expect(await collect(['event: first\ndata: 1\n\ndata: 2\n\n'])).toEqual([
      { event: 'first', data: '1' },
      { data: '2' },
    ]);
  });

  it('handles comments, a field without a colon and an empty data line', async () => {
    expect(await collect([':ping\n\n: keep-alive\ndata\n\ndata:\ndata: x\n\n'])).toEqual([
      { data: '' },
      { data: '\nx' },
    ]);
  });

  it('strips a UTF-8 byte order mark at the start', async () => {
    expect(await collect([Uint8Array.of(0xef, 0xbb), Uint8Array.of(0xbf), bytes('data: x\n\n')])).toEqual([
      { data: 'x' },
    ]);
  });

  // BUG (providers/sse.ts nextLineEnd): a CR at the very end of the input is held back as a possible
  // first half of CRLF, and nothing flushes it when the source ends, so a CR-only stream loses its last
  // event (a chat stream's `data: [DONE]`).
  it('dispatches the last event of a CR-only stream', async () => {
    expect(await collect(['data: a\r\rdata: [DONE]\r\r'])).toEqual([{ data: 'a' }, { data: '[DONE]' }]);
  });
});

describe('formatSse', () => {
  it('writes bare data events and named events in OpenAI framing', () => {
    expect(formatSse({ data: '{"a":1}' })).toBe('data: {"a":1}\n\n');
    expect(formatSse({ event: 'response.completed', data: '{"b":2}' })).toBe(
      'event: response.completed\ndata: {"b":2}\n\n',
    );
  });

  it('round-trips through parseSse', async () => {
    const events: SseEvent[] = [
      { data: '{"id":"chatcmpl-1","choices":[]}' },
      { event: 'response.output_text.delta', data: '{"delta":"🌍"}' },
      { data: '[DONE]' },
    ];
    expect(await collect([events.map(formatSse).join('')])).toEqual(events);
  });

  // BUG (providers/sse.ts formatSse): data containing a line break (legal SSE: an upstream may send a
  // multi-line `data:` event, which parseSse joins with \n) is written as one `data:` line, so the
  // relayed event is cut at the first line break and the rest becomes unknown fields.
  it('round-trips multi-line data', async () => {
    const event: SseEvent = { data: '{\n"a": 1\n}' };
    expect(await collect([formatSse(event)])).toEqual([event]);
  });
});
