/**
 * Webhook event names. Gantry emits four canonical events; requests may name them in any of the
 * spellings the spec shows (section 6 lists several inconsistent ones), so parsing is lenient and
 * everything downstream only ever sees the canonical names.
 */

export const WEBHOOK_EVENTS = [
  'prediction.started',
  'prediction.succeeded',
  'prediction.failed',
  'prediction.canceled',
] as const;

export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

/**
 * Every accepted spelling (lower-case) → canonical event. `completed` means succeeded and `processing`
 * means started, as the spec's examples use them; both `canceled` and `cancelled` are shown.
 */
const ALIASES: ReadonlyMap<string, WebhookEvent> = new Map(
  (
    [
      ['started', 'prediction.started'],
      ['processing', 'prediction.started'],
      ['succeeded', 'prediction.succeeded'],
      ['completed', 'prediction.succeeded'],
      ['failed', 'prediction.failed'],
      ['canceled', 'prediction.canceled'],
      ['cancelled', 'prediction.canceled'],
    ] as const
  ).flatMap(([bare, event]): [string, WebhookEvent][] => [
    [bare, event],
    [`prediction.${bare}`, event],
  ]),
);

export type ParsedWebhookEvents =
  | { events: Set<WebhookEvent> }
  /** `index` is the offending entry, or null when the value is not a list at all. */
  | { error: string; index: number | null };

/** Longest event text echoed back in an error, so a huge bogus value does not end up in the response. */
const ECHO_LIMIT = 64;

/**
 * Parses `webhook.events` from a request. Absent (undefined/null) or empty means every event: a caller
 * who gives a webhook URL without a filter wants to hear about the whole lifecycle.
 */
export function parseWebhookEvents(list: unknown): ParsedWebhookEvents {
  if (list === undefined || list === null) return { events: new Set(WEBHOOK_EVENTS) };
  if (!Array.isArray(list)) return { error: 'webhook.events must be an array of event names', index: null };
  if (list.length === 0) return { events: new Set(WEBHOOK_EVENTS) };

  const events = new Set<WebhookEvent>();
  for (const [index, entry] of list.entries()) {
    if (typeof entry !== 'string') {
      return { error: `webhook.events[${index}] must be a string`, index };
    }
    const event = ALIASES.get(entry.trim().toLowerCase());
    if (event === undefined) {
      const shown = entry.length > ECHO_LIMIT ? `${entry.slice(0, ECHO_LIMIT)}…` : entry;
      return {
        error: `webhook.events[${index}] is not a known event: ${JSON.stringify(shown)} (use one of ${WEBHOOK_EVENTS.join(', ')})`,
        index,
      };
    }
    events.add(event);
  }
  return { events };
}

/** Normalises a single event name, or returns null when it is not one Gantry knows. */
export function canonicalWebhookEvent(name: string): WebhookEvent | null {
  return ALIASES.get(name.trim().toLowerCase()) ?? null;
}

/**
 * The event a prediction status change fires, or null for statuses that fire none (starting, queued…).
 * `cancelled` is accepted because the spec spells the status both ways.
 */
export function eventForStatus(status: string): WebhookEvent | null {
  switch (status) {
    case 'processing':
      return 'prediction.started';
    case 'succeeded':
      return 'prediction.succeeded';
    case 'failed':
      return 'prediction.failed';
    case 'canceled':
    case 'cancelled':
      return 'prediction.canceled';
    default:
      return null;
  }
}
