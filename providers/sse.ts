import { StringDecoder } from 'node:string_decoder';
import type { SseEvent } from './types.js';

/**
 * Parses a byte stream of server-sent events (WHATWG framing: LF, CRLF or CR line ends, multi-line
 * `data`, comments). An event still open when the stream ends is dropped, as the standard says: a cut
 * stream must not look complete.
 */
export async function* parseSse(source: AsyncIterable<Uint8Array | string>): AsyncGenerator<SseEvent> {
  const decoder = new SseDecoder();
  for await (const chunk of source) {
    for (const event of decoder.push(chunk)) yield event;
  }
  for (const event of decoder.end()) yield event;
}

const NO_EVENTS: readonly SseEvent[] = [];

/**
 * The same parser driven by hand: push each chunk as it arrives and take the events it completes, then
 * call end() once. Runs on every streamed chunk, so it works on whole lines found with indexOf and
 * decodes with node's StringDecoder (a TextDecoder in streaming mode costs several times as much).
 */
export class SseDecoder {
  private readonly utf8 = new StringDecoder('utf8');
  private started = false;
  /** Text of the line not yet ended. */
  private buffer = '';
  private event: string | undefined;
  /** The event's data lines so far, joined with \n; undefined until its first `data` line. */
  private data: string | undefined;
  private events: SseEvent[] = [];

  /** Adds a chunk; returns the events it completes (often none). */
  push(chunk: Uint8Array | string): readonly SseEvent[] {
    const text = typeof chunk === 'string' ? chunk : this.utf8.write(chunk as Buffer);
    if (text === '') return NO_EVENTS;
    this.scan(this.started ? text : this.stripBom(text), false);
    return this.take();
  }

  /** The source has ended: the events its last bytes complete. */
  end(): readonly SseEvent[] {
    const rest = this.utf8.end();
    this.scan(this.started || rest === '' ? rest : this.stripBom(rest), true);
    return this.take();
  }

  private stripBom(text: string): string {
    this.started = true;
    return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  }

  private take(): readonly SseEvent[] {
    if (this.events.length === 0) return NO_EVENTS;
    const out = this.events;
    this.events = [];
    return out;
  }

  private scan(text: string, final: boolean): void {
    const buffer = this.buffer === '' ? text : this.buffer + text;
    let start = 0;
    if (buffer.indexOf('\r') === -1) {
      // LF only, as nearly every upstream sends: each line ends at the next \n.
      for (let end = buffer.indexOf('\n'); end !== -1; end = buffer.indexOf('\n', start)) {
        this.line(buffer, start, end);
        start = end + 1;
      }
    } else {
      for (;;) {
        const end = nextLineEnd(buffer, start, final);
        if (end === -1) break;
        this.line(buffer, start, end);
        start = end + (buffer.charCodeAt(end) === 13 && buffer.charCodeAt(end + 1) === 10 ? 2 : 1);
      }
    }
    this.buffer = start === 0 ? buffer : buffer.slice(start);
  }

  /** One line: buffer[start, end). */
  private line(buffer: string, start: number, end: number): void {
    if (start === end) {
      if (this.data !== undefined) {
        this.events.push(
          this.event === undefined ? { data: this.data } : { event: this.event, data: this.data },
        );
      }
      this.event = undefined;
      this.data = undefined;
      return;
    }
    if (buffer.charCodeAt(start) === 58 /* ':' comment */) return;
    let colon = buffer.indexOf(':', start);
    if (colon === -1 || colon > end) colon = end;
    const field = buffer.slice(start, colon);
    let from = colon + 1;
    if (from < end && buffer.charCodeAt(from) === 32) from++;
    const value = from >= end ? '' : buffer.slice(from, end);
    if (field === 'data') this.data = this.data === undefined ? value : `${this.data}\n${value}`;
    else if (field === 'event') this.event = value;
  }
}

/** The index of the next line end (\n, \r or \r\n) from `from`, or -1 when the line is not complete yet. */
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
  const lines =
    data.indexOf('\n') === -1 && data.indexOf('\r') === -1 ? data : data.split(/\r\n|\r|\n/).join('\ndata: ');
  return event.event === undefined ? `data: ${lines}\n\n` : `event: ${event.event}\ndata: ${lines}\n\n`;
}
