/**
 * A model's outage, as the status tests stage it: acme/chat served by one fake upstream whose circuit
 * opens after two failed calls; the upstream hangs up (the model goes offline) and later comes back.
 */
import OpenAI from 'openai';
import { expect } from 'vitest';
import { errorOf } from './api-error.js';
import type { FakeOpenAI } from './fake-openai.js';
import type { TestGantry } from './gantry.js';
import { waitFor } from './wait.js';

/** Upstream timeouts short enough that a dead upstream fails a call well within a test. */
export const QUICK_TIMEOUTS = '{ connect_ms: 500, first_byte_ms: 2000, idle_ms: 2000, total_ms: 5000 }';

/**
 * acme/chat's entry under `models:`, served by `provider` alone: two failures open the circuit, which
 * stays open `cooldownSeconds` (longer than a page's cache when a test must see the model offline).
 */
export function acmeChatModel(provider: string, cooldownSeconds: number): string {
  return `  - namespace: acme/chat
    name: Acme Chat
    type: text
    vendor: { name: Acme, slug: acme }
    routes: [{ provider: ${provider}, model: m }]
    routing: { breaker: { consecutive_failures: 2, cooldown_seconds: ${cooldownSeconds} } }`;
}

/** One chat call to acme/chat, without the SDK's retries: each call is one try. */
export function chatAsker(g: TestGantry): () => Promise<unknown> {
  const client = new OpenAI({ apiKey: g.key, baseURL: g.baseURL, maxRetries: 0 });
  return () =>
    client.chat.completions.create({ model: 'acme/chat', messages: [{ role: 'user', content: 'hi' }] });
}

/** acme/chat's upstream dies: two failed calls open its only circuit, the model is offline. Returns the call. */
export async function takeOffline(g: TestGantry, upstream: FakeOpenAI): Promise<() => Promise<unknown>> {
  const ask = chatAsker(g);
  upstream.setBehavior({ hangUp: true });
  await errorOf(ask());
  await errorOf(ask());
  expect(g.gantry.routing.statusOf('acme/chat')?.status).toBe('offline');
  return ask;
}

/** The upstream is back: once the cooldown ends, a trial call closes the circuit. */
export async function bringBack(
  g: TestGantry,
  upstream: FakeOpenAI,
  ask: () => Promise<unknown>,
): Promise<void> {
  upstream.setBehavior({});
  await waitFor(
    'half-open',
    () =>
      g.gantry.routing.of('acme/chat')?.deployments[0]?.breaker.state === 'half_open' ? true : undefined,
    15_000,
  );
  await ask();
  expect(g.gantry.routing.statusOf('acme/chat')?.status).toBe('operational');
}

/** A model only the `test` account may use: the public status page must never show it. */
export function secretModel(provider: string): string {
  return `  - namespace: secret/private-model
    name: Secret Private Model
    type: text
    vendor: { name: Secret, slug: secret }
    accounts: [test]
    routes: [{ provider: ${provider}, model: m }]`;
}
