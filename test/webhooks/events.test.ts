import { describe, expect, it } from 'vitest';
import {
  canonicalWebhookEvent,
  eventForStatus,
  parseWebhookEvents,
  WEBHOOK_EVENTS,
  type WebhookEvent,
} from '../../src/webhooks/events.js';

function eventsOf(list: unknown): WebhookEvent[] {
  const parsed = parseWebhookEvents(list);
  if (!('events' in parsed)) throw new Error(`unexpected error: ${parsed.error}`);
  return [...parsed.events].sort();
}

describe('parseWebhookEvents', () => {
  it('means every event when the list is absent, null or empty', () => {
    const all = [...WEBHOOK_EVENTS].sort();
    expect(eventsOf(undefined)).toEqual(all);
    expect(eventsOf(null)).toEqual(all);
    expect(eventsOf([])).toEqual(all);
  });

  it.each([
    ['prediction.started', 'prediction.started'],
    ['prediction.processing', 'prediction.started'],
    ['processing', 'prediction.started'],
    ['started', 'prediction.started'],
    ['prediction.succeeded', 'prediction.succeeded'],
    ['prediction.completed', 'prediction.succeeded'],
    ['succeeded', 'prediction.succeeded'],
    ['completed', 'prediction.succeeded'],
    ['prediction.failed', 'prediction.failed'],
    ['failed', 'prediction.failed'],
    ['prediction.canceled', 'prediction.canceled'],
    ['prediction.cancelled', 'prediction.canceled'],
    ['canceled', 'prediction.canceled'],
    ['cancelled', 'prediction.canceled'],
  ])('accepts %s as %s', (alias, canonical) => {
    expect(eventsOf([alias])).toEqual([canonical]);
  });

  it('ignores case and surrounding spaces, and folds duplicates', () => {
    expect(eventsOf(['Prediction.Completed', ' SUCCEEDED ', 'completed', 'Failed'])).toEqual([
      'prediction.failed',
      'prediction.succeeded',
    ]);
  });

  it('names the offending entry', () => {
    expect(parseWebhookEvents(['succeeded', 'prediction.exploded'])).toEqual({
      error: expect.stringContaining('webhook.events[1]'),
      index: 1,
    });
    expect(parseWebhookEvents(['failed', 42])).toEqual({
      error: 'webhook.events[1] must be a string',
      index: 1,
    });
  });

  it('refuses a value that is not a list', () => {
    expect(parseWebhookEvents('succeeded')).toEqual({ error: expect.any(String), index: null });
    expect(parseWebhookEvents({ 0: 'succeeded' })).toEqual({ error: expect.any(String), index: null });
  });

  it('does not echo a huge bogus entry in full', () => {
    const parsed = parseWebhookEvents(['x'.repeat(10_000)]);
    expect('error' in parsed && parsed.error.length).toBeLessThan(300);
  });
});

describe('canonicalWebhookEvent', () => {
  it('normalises one name or returns null', () => {
    expect(canonicalWebhookEvent('prediction.CANCELLED')).toBe('prediction.canceled');
    expect(canonicalWebhookEvent('output')).toBeNull();
  });
});

describe('eventForStatus', () => {
  it('maps status changes to the events they fire', () => {
    expect(eventForStatus('processing')).toBe('prediction.started');
    expect(eventForStatus('succeeded')).toBe('prediction.succeeded');
    expect(eventForStatus('failed')).toBe('prediction.failed');
    expect(eventForStatus('canceled')).toBe('prediction.canceled');
    expect(eventForStatus('cancelled')).toBe('prediction.canceled');
  });

  it('fires nothing for statuses before processing', () => {
    for (const status of ['starting', 'queued', 'pending', 'bogus'])
      expect(eventForStatus(status)).toBeNull();
  });
});
