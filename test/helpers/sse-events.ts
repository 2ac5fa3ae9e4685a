/** Parsing a prediction's event stream (GET /v1/predictions/{id}/stream) in tests. */

export interface SseEvent {
  /** The last `id:` field of the event, as sent (predictions send their seq: 1, 2, 3…). */
  id: string | undefined;
  event: string;
  data: string;
}

/** Parses an event stream as the WHATWG EventSource algorithm does (comments skipped, data lines joined). */
export function parseSse(text: string): SseEvent[] {
  const events: SseEvent[] = [];
  for (const block of text.replaceAll('\r\n', '\n').split('\n\n')) {
    let id: string | undefined;
    let event = 'message';
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'id') id = value;
      else if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length > 0) events.push({ id, event, data: data.join('\n') });
  }
  return events;
}
