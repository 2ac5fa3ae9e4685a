/**
 * External classifiers through a running Gantry and the official SDK (README, "External
 * classifiers"): a chat completion on a model whose policy is `annotate` with a remote classifier gets
 * `prompt_filter_results[0].content_filter_results` with the categories that classifier evaluates; when
 * the service fails, `on_failure: open` still answers (the results carry the error) and `closed` is a
 * 503 `content_filter_unavailable`. The key and the checked text never reach the logs.
 */
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { errorOf } from '../helpers/api-error.js';
import { type FakeModeration, startFakeModeration } from '../helpers/fake-moderation.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';

const OPENAI_KEY = 'sk-e2e-moderation-5f0c1d2e3a4b';
const AZURE_KEY = 'azure-e2e-key-9a8b7c6d5e4f';

const yaml = (fake: FakeModeration) => `
providers:
  local: { kind: local }
tiers:
  default: {}
safety:
  policies:
    mod-open: { mode: annotate, classifier: mod-open }
    mod-closed: { mode: annotate, classifier: mod-closed }
    azure: { mode: annotate, classifier: azure }
  classifiers:
    mod-open:
      kind: openai_moderations
      url: ${fake.moderationsUrl}
      api_key_env: MOD_KEY
      model: omni-moderation-latest
      timeout_ms: 400
      on_failure: open
    mod-closed:
      kind: openai_moderations
      url: ${fake.moderationsUrl}
      api_key_env: MOD_KEY
      timeout_ms: 400
      on_failure: closed
    azure:
      kind: azure_content_safety
      url: ${fake.origin}
      api_key_env: ACS_KEY
      timeout_ms: 400
models:
  - namespace: acme/mod-open
    name: Moderated (open)
    type: text
    apis: [chat]
    safety: mod-open
    routes: [{ provider: local, model: local-chat }]
  - namespace: acme/mod-closed
    name: Moderated (closed)
    type: text
    apis: [chat]
    safety: mod-closed
    routes: [{ provider: local, model: local-chat }]
  - namespace: acme/azure
    name: Content Safety
    type: text
    apis: [chat]
    safety: azure
    routes: [{ provider: local, model: local-chat }]
`;

it('Gantry starts with both kinds configured, sends nothing at start, and stops', async () => {
  const fake = await startFakeModeration({ openaiKey: OPENAI_KEY, azureKey: AZURE_KEY });
  try {
    const lines: string[] = [];
    const gantry = await startGantry(
      yaml(fake),
      { MOD_KEY: OPENAI_KEY, ACS_KEY: AZURE_KEY },
      { onLog: (line) => lines.push(line) },
    );
    const names = [...gantry.gantry.safety.classifiers.keys()].sort();
    expect(names).toEqual(['azure', 'mod-closed', 'mod-open', 'offline']);
    await gantry.close();
    expect(fake.requests).toHaveLength(0);
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.join('\n')).not.toContain(OPENAI_KEY);
    expect(lines.join('\n')).not.toContain(AZURE_KEY);
  } finally {
    await fake.close();
  }
});

describe('external classifiers through Gantry', () => {
  let fake: FakeModeration;
  let gantry: TestGantry;
  let client: OpenAI;
  const logs: string[] = [];

  beforeAll(async () => {
    fake = await startFakeModeration({ openaiKey: OPENAI_KEY, azureKey: AZURE_KEY });
    gantry = await startGantry(
      yaml(fake),
      { MOD_KEY: OPENAI_KEY, ACS_KEY: AZURE_KEY },
      { onLog: (line) => logs.push(line) },
    );
    client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0, logLevel: 'off' });
  });
  afterEach(() => fake.reset());
  afterAll(async () => {
    await gantry?.close();
    await fake?.close();
    const all = logs.join('\n');
    expect(all).not.toContain(OPENAI_KEY);
    expect(all).not.toContain(AZURE_KEY);
    expect(all).not.toContain('secret sentence');
  });

  const ask = (model: string, content: string) =>
    client.chat.completions.create({ model, messages: [{ role: 'user', content }] });

  it('annotate with openai_moderations: prompt_filter_results from the service', async () => {
    const answer = await ask('acme/mod-open', 'a secret sentence [[violence=0.8]] [[harassment=0.2]]');
    assertOpenAISchema('CreateChatCompletionResponse', answer);
    expect(answer.choices[0]?.message.content).toBeTruthy();
    const results = (answer as unknown as { prompt_filter_results: unknown }).prompt_filter_results;
    expect(results).toEqual([
      {
        prompt_index: 0,
        content_filter_results: {
          hate: { filtered: false, severity: 'low' },
          sexual: { filtered: false, severity: 'safe' },
          violence: { filtered: false, severity: 'high' },
          self_harm: { filtered: false, severity: 'safe' },
        },
      },
    ]);
    const prompt = fake.requests.find((r) => String(r.body?.input).includes('secret sentence'));
    expect(prompt?.headers.authorization).toBe(`Bearer ${OPENAI_KEY}`);
    assertOpenAISchema('CreateModerationRequest', prompt?.body);
  });

  it('annotate with azure_content_safety: harm severities and the jailbreak check', async () => {
    const answer = await ask('acme/azure', 'a secret sentence [[Hate=4]] [[attack]]');
    assertOpenAISchema('CreateChatCompletionResponse', answer);
    const results = (
      answer as unknown as { prompt_filter_results: Array<{ content_filter_results: unknown }> }
    ).prompt_filter_results;
    expect(results[0]?.content_filter_results).toEqual({
      hate: { filtered: false, severity: 'medium' },
      sexual: { filtered: false, severity: 'safe' },
      violence: { filtered: false, severity: 'safe' },
      self_harm: { filtered: false, severity: 'safe' },
      jailbreak: { filtered: false, detected: true },
    });
  });

  it('on_failure open: the answer still comes, the results carry the error', async () => {
    fake.setBehavior({ status: 500 });
    const answer = await ask('acme/mod-open', 'a secret sentence');
    assertOpenAISchema('CreateChatCompletionResponse', answer);
    expect(answer.choices[0]?.message.content).toBeTruthy();
    const results = (
      answer as unknown as { prompt_filter_results: Array<{ content_filter_results: unknown }> }
    ).prompt_filter_results;
    expect(results[0]?.content_filter_results).toEqual({
      error: {
        code: 'content_filter_error',
        message: 'The contents are not filtered: safety classifier "mod-open": the service answered HTTP 500',
      },
    });
  });

  it('on_failure open: a timeout answers within it', async () => {
    fake.setBehavior({ delayMs: 5_000 });
    const started = performance.now();
    const answer = await ask('acme/mod-open', 'a secret sentence');
    expect(performance.now() - started).toBeLessThan(3_000);
    const results = (
      answer as unknown as { prompt_filter_results: Array<{ content_filter_results: unknown }> }
    ).prompt_filter_results;
    expect(results[0]?.content_filter_results).toMatchObject({
      error: {
        code: 'content_filter_error',
        message: 'The contents are not filtered: safety classifier "mod-open": timed out after 400 ms',
      },
    });
  });

  it('on_failure closed: 503 content_filter_unavailable', async () => {
    fake.setBehavior({ drop: true });
    const err = await errorOf(ask('acme/mod-closed', 'a secret sentence'));
    expect(err.status).toBe(503);
    expect(err.code).toBe('content_filter_unavailable');
    assertOpenAISchema('ErrorResponse', { error: err.error });
  });
});
