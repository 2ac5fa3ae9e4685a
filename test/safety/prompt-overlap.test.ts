/**
 * When the chat prompt check runs relative to the upstream call (README, "Safety", cost): under
 * `annotate` (failing open) the request is written to the upstream first and the prompt is checked while
 * the upstream works, so the check adds no latency of its own; under `block` the prompt is checked before
 * anything is sent. The order is read from undici's diagnostics channel (the request's headers leaving for
 * the upstream) and from the built-in classifier's calls.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TextClassifier } from '../../src/safety/classifier.js';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';

let openai: FakeOpenAI;
let gantry: TestGantry;
const events: string[] = [];

function onSendHeaders(message: unknown): void {
  // The test's own fetch publishes here too: only requests to the fake upstream count.
  const { request } = message as { request: { origin: string; path: string } };
  if (request.origin === openai.origin && request.path.endsWith('/chat/completions')) {
    events.push('upstream request sent');
  }
}

beforeAll(async () => {
  openai = await startFakeOpenAI();
  const model = (name: string, safety: string) => `
  - namespace: ${name}
    name: ${name}
    type: text
    apis: [chat]
    routes: [{ provider: upstream, model: fake-model }]
    safety: ${safety}`;
  gantry = await startGantry(`
providers:
  upstream: { kind: openai, base_url: ${openai.url} }
tiers:
  default: {}
accounts:
  - name: test
models:${model('o/annotate', 'annotate')}${model('o/block', 'block')}
`);
  const offline = gantry.gantry.safety.classifiers.get('offline')?.classifier as TextClassifier;
  const classify = offline.classify.bind(offline);
  offline.classify = (text, source, signal) => {
    events.push(`classify ${source}`);
    return classify(text, source, signal);
  };
  diagnostics.subscribe('undici:client:sendHeaders', onSendHeaders);
});

afterAll(async () => {
  diagnostics.unsubscribe('undici:client:sendHeaders', onSendHeaders);
  await gantry?.close();
  await openai?.close();
});

async function chat(model: string): Promise<Record<string, unknown>> {
  events.length = 0;
  const res = await fetch(`${gantry.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Plan a small garden for spring.' }] }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

describe('the chat prompt check and the upstream call', () => {
  it('annotate: the request leaves for the upstream before the prompt is checked', async () => {
    // On a connection already open (the first request waits for its connection, the check does not).
    await chat('o/annotate');
    const body = await chat('o/annotate');
    expect(body.prompt_filter_results).toBeDefined();
    expect(events).toEqual(['upstream request sent', 'classify prompt', 'classify completion']);
  });

  it('block: the prompt is checked before anything is sent', async () => {
    const body = await chat('o/block');
    expect(body.prompt_filter_results).toBeDefined();
    expect(events).toEqual(['classify prompt', 'upstream request sent', 'classify completion']);
  });
});
