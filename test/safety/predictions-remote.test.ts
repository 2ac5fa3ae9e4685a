/**
 * Prediction prompts under a policy whose classifier is a remote service (README, "Safety",
 * Predictions, and "External classifiers"): personal data is masked in process before the remote
 * classifier is asked, so the service never sees the original; the masked input is what is stored and
 * run, and `metadata.safety` reports `pii` detected. A remote that is down under `on_failure: closed`
 * refuses the prediction with 503 `content_filter_unavailable` and stores nothing.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type FakeModeration, startFakeModeration } from '../helpers/fake-moderation.js';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { type Res, restCall } from '../helpers/rest.js';
import { waitFor } from '../helpers/wait.js';

const MOD_KEY = 'sk-preds-moderation-7d1e2f3a4b5c';
const OPEN = 'acme/image-remote-redact';
const CLOSED = 'acme/image-remote-closed';
const EMAIL = 'bob.hidden@example.org';
const OTHER = 'carol.unseen@example.net';

const image = (namespace: string, safety: string) => `
  - namespace: ${namespace}
    name: ${namespace}
    type: image
    vendor: { name: Acme, slug: acme }
    serves: [predictions]
    routes: [{ provider: local, model: local-image }]
    safety: ${safety}`;

const config = (
  fake: FakeModeration,
) => `${LOCAL_CONFIG}${image(OPEN, 'remote-redact')}${image(CLOSED, 'remote-closed')}
safety:
  policies:
    remote-redact: { mode: annotate, classifier: mod, redact: [email] }
    remote-closed: { mode: block, classifier: mod-closed, redact: [email] }
  classifiers:
    mod:
      kind: openai_moderations
      url: ${fake.moderationsUrl}
      api_key_env: MOD_KEY
      timeout_ms: 2000
      on_failure: open
    mod-closed:
      kind: openai_moderations
      url: ${fake.moderationsUrl}
      api_key_env: MOD_KEY
      timeout_ms: 2000
      on_failure: closed
`;

interface Prediction {
  id: string;
  status: string;
  input: Record<string, unknown>;
  metadata: {
    safety?: {
      policy: string;
      prompt?: { content_filter_results: Record<string, unknown>; redacted?: number };
    };
  };
}

let fake: FakeModeration;
let gantry: TestGantry;
const logs: string[] = [];

beforeAll(async () => {
  fake = await startFakeModeration({ openaiKey: MOD_KEY });
  gantry = await startGantry(config(fake), { MOD_KEY }, { onLog: (line) => logs.push(line) });
});
afterEach(() => fake.reset());
afterAll(async () => {
  await gantry?.close();
  await fake?.close();
});

function create(body: Record<string, unknown>): Promise<Res<Prediction>> {
  return restCall<Prediction>(gantry.origin, 'POST', '/v1/predictions', { key: gantry.key, body });
}

async function metricsText(): Promise<string> {
  return (await fetch(`${gantry.origin}/metrics`)).text();
}

/** Every text the fake moderation service was sent. */
function sentTexts(): string[] {
  return fake.requests.flatMap((r) => {
    const input = r.body?.input;
    return typeof input === 'string' ? [input] : Array.isArray(input) ? (input as string[]) : [];
  });
}

describe('a redact policy with a remote classifier', () => {
  it('masks in process: the remote sees only the masked prompt, the stored input is masked, pii is reported', async () => {
    const prompt = `a portrait for ${EMAIL}, cc ${OTHER} [[violence=0.7]]`;
    const created = await create({ model: OPEN, input: { prompt } });
    expect(created.status, created.text).toBe(200);
    expect(created.body.input.prompt).toBe('a portrait for [EMAIL], cc [EMAIL] [[violence=0.7]]');

    // The remote classifier was asked, with the masked text only.
    const texts = sentTexts();
    expect(texts.length).toBeGreaterThan(0);
    expect(texts.join('\n')).toContain('[EMAIL]');
    for (const request of fake.requests) {
      expect(request.rawBody.toString()).not.toContain(EMAIL);
      expect(request.rawBody.toString()).not.toContain(OTHER);
    }

    const safety = created.body.metadata.safety;
    expect(safety?.policy).toBe('remote-redact');
    expect(safety?.prompt?.redacted).toBe(2);
    // pii from the masking (the remote does not evaluate it), violence from the remote's score.
    expect(safety?.prompt?.content_filter_results.pii).toEqual({ filtered: false, detected: true });
    expect(safety?.prompt?.content_filter_results.violence).toMatchObject({ filtered: false });
    expect(safety?.prompt?.content_filter_results.violence).not.toEqual({
      filtered: false,
      severity: 'safe',
    });

    const stored = await gantry.gantry.predictions.deps.store.get(created.body.id);
    expect(JSON.stringify(stored)).not.toContain(EMAIL);
    expect(JSON.stringify(stored)).toContain('[EMAIL]');
    await waitFor(`prediction ${created.body.id} to end`, async () => {
      const res = await restCall<Prediction>(gantry.origin, 'GET', `/v1/predictions/${created.body.id}`, {
        key: gantry.key,
      });
      return res.body.status === 'succeeded' ? res.body : undefined;
    });

    // The check is counted under the classifier that ran it.
    const metrics = await metricsText();
    expect(metrics).toMatch(
      /gantry_safety_checks_total\{[^}]*api="predictions"[^}]*classifier="mod"[^}]*\} [1-9]/,
    );
    expect(logs.join('\n')).not.toContain(EMAIL);
    expect(logs.join('\n')).not.toContain(MOD_KEY);
  });

  it('a prompt without personal data goes to the remote as it is and reports no pii', async () => {
    const created = await create({ model: OPEN, input: { prompt: 'a quiet lake at dawn' } });
    expect(created.status, created.text).toBe(200);
    expect(created.body.input.prompt).toBe('a quiet lake at dawn');
    expect(sentTexts()).toEqual(['a quiet lake at dawn']);
    expect(created.body.metadata.safety?.prompt?.redacted).toBeUndefined();
    expect(created.body.metadata.safety?.prompt?.content_filter_results).not.toHaveProperty('pii');
  });
});

describe('a remote classifier that is down under on_failure: closed', () => {
  it('refuses with 503 content_filter_unavailable and stores nothing', async () => {
    const before = await gantry.gantry.predictions.deps.store.unfinished(100);
    fake.setBehavior({ status: 500 });
    const refused = await create({ model: CLOSED, input: { prompt: `a portrait for ${EMAIL}` } });
    expect(refused.status, refused.text).toBe(503);
    expect(refused.text).toContain('content_filter_unavailable');
    expect(refused.text).not.toContain(EMAIL);
    // The service was asked (and never with the original) before the refusal.
    expect(fake.requests.length).toBeGreaterThan(0);
    for (const request of fake.requests) expect(request.rawBody.toString()).not.toContain(EMAIL);
    expect(await gantry.gantry.predictions.deps.store.unfinished(100)).toEqual(before);
    // The failed check is counted as an error, like one that fails open.
    expect(await metricsText()).toMatch(
      /gantry_safety_checks_total\{api="predictions",stage="prompt",classifier="[^"]+",outcome="error"\} [1-9]/,
    );
  });
});
