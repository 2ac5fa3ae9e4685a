import type { SseEvent } from './types.js';

/**
 * Parses a byte stream of server-sent events (WHATWG framing: LF, CRLF or CR line ends, multi-line
 * `data`, comments). An event still open when the stream ends is dropped, as the standard says: a cut
 * stream must not look complete.
 */
export async function* parseSse(source: AsyncIterable<Uint8Array | string>): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffer = '';
  let event: string | undefined;
  let data: string[] = [];

  for await (const chunk of source) {
    buffer += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });

    let start = 0;
    for (;;) {
      const end = nextLineEnd(buffer, start);
      if (end === -1) break;
      const line = buffer.slice(start, end);
      start = end + (buffer[end] === '\r' && buffer[end + 1] === '\n' ? 2 : 1);

      if (line === '') {
        if (data.length > 0) {
          yield event === undefined ? { data: data.join('\n') } : { event, data: data.join('\n') };
        }
        event = undefined;
        data = [];
        continue;
      }
      if (line.charCodeAt(0) === 58 /* ':' comment */) continue;
      const colon = line.indexOf(':');
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? '' : line.slice(colon + 1);
      if (value.charCodeAt(0) === 32) value = value.slice(1);
      if (field === 'data') data.push(value);
      else if (field === 'event') event = value;
    }
    buffer = buffer.slice(start);
  }
}

function nextLineEnd(text: string, from: number): number {
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 10) return i;
    if (c === 13) {
      // A lone CR at the end of the buffer may be the first half of CRLF: wait for more.
      if (i === text.length - 1) return -1;
      return i;
    }
  }
  return -1;
}

/** Serialises one event in the framing OpenAI uses. */
export function formatSse(event: SseEvent): string {
  return event.event === undefined
    ? `data: ${event.data}\n\n`
    : `event: ${event.event}\ndata: ${event.data}\n\n`;
}
