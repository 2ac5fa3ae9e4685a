import type { SseEvent } from './types.js';

/**
 * Parses a byte stream of server-sent events (WHATWG framing: LF, CRLF or CR line ends, multi-line
 * `data`, comments). An event still open when the stream ends is dropped, as the standard says: a cut
 * stream must not look complete.
 */
export async function* parseSse(source: AsyncIterable<Uint8Array | string>): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  const parser = new SseLineParser();
  for await (const chunk of source) {
    const events = parser.push(
      typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true }),
      false,
    );
    for (const event of events) yield event;
  }
  for (const event of parser.push(decoder.decode(), true)) yield event;
}

class SseLineParser {
  private buffer = '';
  private event: string | undefined;
  private data: string[] = [];

  /** Adds text and returns the events it completes. `final`: the source has ended. */
  push(text: string, final: boolean): SseEvent[] {
    const out: SseEvent[] = [];
    const buffer = this.buffer + text;
    let start = 0;
    for (;;) {
      const end = nextLineEnd(buffer, start, final);
      if (end === -1) break;
      this.line(buffer.slice(start, end), out);
      start = end + (buffer[end] === '\r' && buffer[end + 1] === '\n' ? 2 : 1);
    }
    this.buffer = buffer.slice(start);
    return out;
  }

  private line(line: string, out: SseEvent[]): void {
    if (line === '') {
      if (this.data.length > 0) {
        const data = this.data.join('\n');
        out.push(this.event === undefined ? { data } : { event: this.event, data });
      }
      this.event = undefined;
      this.data = [];
      return;
    }
    if (line.charCodeAt(0) === 58 /* ':' comment */) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
  }
}

function nextLineEnd(text: string, from: number, final: boolean): number {
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 10) return i;
    if (c === 13) {
      // A CR at the end of the buffer may be the first half of CRLF: wait for more, unless there is no more.
      if (i === text.length - 1 && !final) return -1;
      return i;
    }
  }
  return -1;
}

/** Serialises one event in the framing OpenAI uses; data with line breaks takes one `data:` line each. */
export function formatSse(event: SseEvent): string {
  const data = event.data;
  const lines = data.includes('\n') || data.includes('\r') ? data.split(/\r\n|\r|\n/).join('\ndata: ') : data;
  return event.event === undefined ? `data: ${lines}\n\n` : `event: ${event.event}\ndata: ${lines}\n\n`;
}
