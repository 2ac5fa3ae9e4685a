/**
 * The built-in local models have a context and an output limit, like real ones: without them 2.4 MB of
 * embeddings input came back as a 128 MB answer and a 3.2 MB prompt streamed back 57 MB. Real Gantry,
 * real HTTP: once with the defaults, once with a small configured context and output cap.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';

let defaults: TestGantry;
let small: TestGantry;

beforeAll(async () => {
  defaults = await startGantry(`${LOCAL_CONFIG}
  - namespace: gantry/local-image
    name: Local image
    type: image
    serves: [predictions]
    routes: [{ provider: local, model: local-image }]
`);
  small = await startGantry(`
providers:
  local: { kind: local, context_length: 1000, max_output_tokens: 60 }
tiers:
  default: {}
models:
  - { namespace: gantry/local-chat, name: Chat, type: text, routes: [{ provider: local, model: local-chat }] }
  - { namespace: gantry/local-embed, name: Embed, type: text, apis: [embeddings], routes: [{ provider: local, model: local-embed }] }
`);
});
afterAll(async () => {
  await defaults?.close();
  await small?.close();
});

async function post(
  gantry: TestGantry,
  path: string,
  body: unknown,
): Promise<{ status: number; text: string; json: Record<string, unknown> }> {
  const res = await fetch(`${gantry.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // an SSE stream
  }
  return { status: res.status, text, json };
}

function errorOf(answer: { json: Record<string, unknown> }): Record<string, unknown> {
  return answer.json.error as Record<string, unknown>;
}

/** `n` words of about one token each. */
const words = (n: number, word = 'word') => Array.from({ length: n }, () => word).join(' ');

describe('context length', () => {
  it('refuses a chat prompt over the context as OpenAI does, mapped to 400 INVALID_REQUEST', async () => {
    const answer = await post(small, '/chat/completions', {
      model: 'gantry/local-chat',
      messages: [{ role: 'user', content: words(1200) }],
    });
    expect(answer.status).toBe(400);
    const error = errorOf(answer);
    expect(error.type).toBe('invalid_request_error');
    expect(error.code).toBe('invalid_request');
    expect(error.param).toBe('messages');
    expect(error.message).toMatch(
      /maximum context length is 1000 tokens\. However, your messages resulted in 12\d\d tokens/,
    );

    const fits = await post(small, '/chat/completions', {
      model: 'gantry/local-chat',
      messages: [{ role: 'user', content: words(900) }],
    });
    expect(fits.status).toBe(200);
  });

  it('refuses embeddings whose inputs together exceed the context', async () => {
    const answer = await post(small, '/embeddings', {
      model: 'gantry/local-embed',
      input: [words(600), words(600)],
    });
    expect(answer.status).toBe(400);
    expect(errorOf(answer).param).toBe('input');
    expect(errorOf(answer).message).toMatch(/maximum context length is 1000 tokens/);
    const fits = await post(small, '/embeddings', {
      model: 'gantry/local-embed',
      input: [words(400), words(400)],
    });
    expect(fits.status).toBe(200);
  });

  it('by default refuses a 3.2 MB prompt at once instead of streaming it back', async () => {
    const started = performance.now();
    const answer = await post(defaults, '/chat/completions', {
      model: 'gantry/local-chat',
      stream: true,
      messages: [{ role: 'user', content: 'word '.repeat(640_000) }],
    });
    expect(answer.status).toBe(400);
    expect(errorOf(answer).message).toMatch(/maximum context length is 128000 tokens/);
    expect(answer.text.length).toBeLessThan(1000);
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  it('by default takes at most 2,048 embeddings inputs', async () => {
    const answer = await post(defaults, '/embeddings', {
      model: 'gantry/local-embed',
      input: Array.from({ length: 2049 }, () => 'a'),
    });
    expect(answer.status).toBe(400);
    expect(errorOf(answer).param).toBe('input');
    expect(errorOf(answer).message).toContain('at most 2048');
  });
});

describe('output cap', () => {
  it('generates at most max_output_tokens over all choices, each ending with length', async () => {
    const answer = await post(small, '/chat/completions', {
      model: 'gantry/local-chat',
      n: 3,
      messages: [{ role: 'user', content: words(500) }],
    });
    expect(answer.status).toBe(200);
    const choices = answer.json.choices as Array<{ finish_reason: string; message: { content: string } }>;
    expect(choices).toHaveLength(3);
    for (const choice of choices) {
      expect(choice.finish_reason).toBe('length');
      expect(choice.message.content.startsWith('You said: word word')).toBe(true);
    }
    expect((answer.json.usage as { completion_tokens: number }).completion_tokens).toBe(60);
  });

  it('streams a long run without spaces back capped, in bounded time', async () => {
    const started = performance.now();
    const answer = await post(defaults, '/chat/completions', {
      model: 'gantry/local-chat',
      stream: true,
      messages: [{ role: 'user', content: 'ab'.repeat(200_000) }],
    });
    expect(answer.status).toBe(200);
    expect(answer.text).toContain('"finish_reason":"length"');
    // 4,096 tokens in chunks of three: a few hundred KB, not the 400 KB prompt many times over
    expect(answer.text.length).toBeLessThan(1_000_000);
    expect(performance.now() - started).toBeLessThan(10_000);
  });
});

describe('media prompts', () => {
  it('refuses an image prompt over 5,000 characters when the prediction is created', async () => {
    const answer = await post(defaults, '/predictions', {
      model: 'gantry/local-image',
      input: { prompt: 'x'.repeat(5001) },
    });
    expect(answer.status).toBe(400);
    expect(errorOf(answer).error_id).toBe('INVALID_INPUT');
    const fields = (errorOf(answer).details as { fields: Array<{ field: string }> }).fields;
    expect(fields.map((f) => f.field)).toEqual(['prompt']);
  });
});
