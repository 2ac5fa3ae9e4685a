/**
 * A text model that serves both APIs (spec 1: the orchestrator decides from the catalogue entry, not the
 * type): as a prediction it runs through its inference adapter, and the output is the generated text.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';

const CONFIG = `${LOCAL_CONFIG}
  - namespace: gantry/chat-both
    name: Chat for both APIs
    type: text
    vendor: { name: Gantry, slug: gantry }
    serves: [inference, predictions]
    apis: [chat]
    routes: [{ provider: local, model: local-chat }]
`;

describe('a text model served as a prediction', () => {
  let gantry: TestGantry;
  const post = (path: string, body: unknown) =>
    fetch(`${gantry.baseURL}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  beforeAll(async () => {
    gantry = await startGantry(CONFIG);
  });
  afterAll(async () => {
    await gantry?.close();
  });

  it('returns the generated text as output, the same text the chat endpoint gives', async () => {
    const prediction = await post('/predictions', {
      model: 'gantry/chat-both',
      input: { prompt: 'hello there' },
      await: true,
    });
    expect(prediction.status).toBe(200);
    const body = (await prediction.json()) as Record<string, unknown>;
    expect(body.status).toBe('succeeded');
    expect(body.model).toEqual({ name: 'gantry/chat-both', type: 'text' });
    expect(typeof body.output).toBe('string');
    expect(body.input).toMatchObject({ prompt: 'hello there', max_tokens: 512 });

    const chat = await post('/chat/completions', {
      model: 'gantry/chat-both',
      messages: [{ role: 'user', content: 'hello there' }],
      max_tokens: 512,
    });
    const completion = (await chat.json()) as { choices: Array<{ message: { content: string } }> };
    expect(body.output).toBe(completion.choices[0]?.message.content);
    expect(body.output).toContain('hello there');
  });

  it('streams the text piece by piece on the prediction stream', async () => {
    const created = await post('/predictions', {
      model: 'gantry/chat-both',
      input: { prompt: 'stream me' },
      stream: true,
    });
    const { id } = (await created.json()) as { id: string };
    const stream = await fetch(`${gantry.baseURL}/predictions/${id}/stream`, {
      headers: { authorization: `Bearer ${gantry.key}` },
    });
    expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await stream.text();
    const events = text
      .split('\n\n')
      .filter((block) => block.includes('event: '))
      .map((block) => ({
        event: /event: (\w+)/.exec(block)?.[1],
        data: block
          .split('\n')
          .filter((l) => l.startsWith('data: '))
          .map((l) => l.slice(6))
          .join('\n'),
      }));
    const pieces = events.filter((e) => e.event === 'output').map((e) => e.data);
    expect(pieces.length).toBeGreaterThan(1);
    expect(events.at(-1)).toEqual({ event: 'done', data: '{"status":"succeeded"}' });
    const final = (await (
      await fetch(`${gantry.baseURL}/predictions/${id}`, {
        headers: { authorization: `Bearer ${gantry.key}` },
      })
    ).json()) as { output: string };
    expect(pieces.join('')).toBe(final.output);
  });
});
