import type { ServerResponse } from 'node:http';

/**
 * Gantry's own time per inference call, sent as `x-gantry-overhead-ms` and observed in
 * gantry_overhead_seconds: from the request's arrival to the answer being handed to the writer, minus
 * the time spent waiting on upstreams (every attempt: to the end of a JSON body, to the first token of
 * a stream). What is left is auth, validation, admission, routing and the writes of this process.
 */
export const OVERHEAD_HEADER = 'x-gantry-overhead-ms';

const ARRIVED = Symbol('gantry.arrivedAt');

type Marked = ServerResponse & { [ARRIVED]?: number };

/** Notes when a request arrived (performance.now()), on its response (request tracking calls this). */
export function markArrival(res: ServerResponse, at: number): void {
  (res as Marked)[ARRIVED] = at;
}

export function arrivalOf(res: ServerResponse): number | undefined {
  return (res as Marked)[ARRIVED];
}

/** The metric label of an inference path: chat, responses, embeddings (bounded, whatever the URL). */
export function apiOfUrl(url: string): string {
  if (url.startsWith('/v1/chat/')) return 'chat';
  if (url.startsWith('/v1/responses')) return 'responses';
  if (url.startsWith('/v1/embeddings')) return 'embeddings';
  return 'other';
}
