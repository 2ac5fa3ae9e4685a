/**
 * Block mode with `n` > 1 on streams (README, "Safety" → "Chat completions"), end to end: a started
 * Gantry in front of a scripted OpenAI-compatible upstream that streams its choices as told and then
 * goes silent without ending. The stream can only end if Gantry stops the upstream itself, which it must
 * do once every choice still open was filtered: a choice that finished normally, or that the upstream
 * never began (servers that ignore `n`), does not keep it going.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type RecordingServer, startRecordingServer, waitUntil, write } from '../helpers/fake-server.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { assertOpenAISchema } from '../helpers/openapi.js';
import { parseSse } from '../helpers/sse-events.js';

const VIOLENT = 'I am going to kill you, I know where you live and I have a gun.';
const CLEAN = 'Have a lovely day, and thank you for the flowers you sent last week.';

/** What the fake streams: these choices' pieces in order, then silence until the client leaves. */
interface Script {
  pieces: Array<{ index: number; content?: string; finish?: string }>;
  /** After the pieces: the usage chunk and `[DONE]`, as an upstream that ends normally. */
  end?: boolean;
}

let upstream: RecordingServer<Script>;
let gantry: TestGantry;

beforeAll(async () => {
  upstream = await startRecordingServer<Script>(
    async (ex) => {
      ex.res.writeHead(200, { 'content-type': 'text/event-stream' });
      const frame = (choices: unknown[], extra: Record<string, unknown> = {}) =>
        `data: ${JSON.stringify({ id: 'chatcmpl-n', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'fake', choices, ...extra })}\n\n`;
      const indexes = [...new Set(ex.behavior.pieces.map((p) => p.index))];
      for (const index of indexes) {
        await write(
          ex.res,
          frame([{ index, delta: { role: 'assistant', content: '' }, finish_reason: null }]),
          ex.gone,
        );
      }
      for (const p of ex.behavior.pieces) {
        const delta = p.content === undefined ? {} : { content: p.content };
        await write(ex.res, frame([{ index: p.index, delta, finish_reason: p.finish ?? null }]), ex.gone);
      }
      if (ex.behavior.end === true) {
        const usage = { prompt_tokens: 5, completion_tokens: 99, total_tokens: 104 };
        await write(ex.res, frame([], { usage }), ex.gone);
        await write(ex.res, 'data: [DONE]\n\n', ex.gone);
        ex.res.end();
        return;
      }
      await waitUntil(ex.gone);
    },
    { name: 'scripted upstream', behavior: { pieces: [] }, errorBody: (message) => ({ error: { message } }) },
  );
  gantry = await startGantry(`
providers:
  upstream: { kind: openai, base_url: ${upstream.origin}/v1 }
tiers:
  default: {}
safety:
  stream_window_chars: 24
models:
  - namespace: s/block
    name: s/block
    type: text
    apis: [chat]
    routes: [{ provider: upstream, model: fake }]
    safety: block
`);
});

afterAll(async () => {
  await gantry?.close();
  await upstream?.close();
});

beforeEach(() => upstream.reset());

type Choice = Record<string, unknown> & {
  index: number;
  delta: { content?: string };
  finish_reason: string | null;
};
type Chunk = Record<string, unknown> & { choices: Choice[] };

async function stream(script: Script, n: number): Promise<{ chunks: Chunk[]; text: string }> {
  upstream.enqueue(script);
  const res = await fetch(`${gantry.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${gantry.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 's/block',
      n,
      messages: [{ role: 'user', content: 'Tell me something' }],
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  expect(res.status).toBe(200);
  const text = await res.text();
  const events = parseSse(text);
  expect(events.at(-1)?.data).toBe('[DONE]');
  const chunks = events.slice(0, -1).map((e) => {
    const chunk = JSON.parse(e.data) as Chunk;
    assertOpenAISchema('CreateChatCompletionStreamResponse', chunk);
    return chunk;
  });
  return { chunks, text };
}

const delivered = (chunks: Chunk[], index: number) =>
  chunks
    .flatMap((c) => c.choices)
    .filter((ch) => ch.index === index)
    .map((ch) => ch.delta.content ?? '')
    .join('');
const finishes = (chunks: Chunk[], index: number) =>
  chunks
    .flatMap((c) => c.choices)
    .filter((ch) => ch.index === index && ch.finish_reason !== null)
    .map((ch) => ch.finish_reason);

describe('block, n > 1: the upstream is stopped once every choice still open was filtered', () => {
  it('an upstream that ignores n (one choice, flagged): stopped, usage for what was delivered, [DONE]', async () => {
    const { chunks, text } = await stream({ pieces: [{ index: 0, content: VIOLENT }] }, 3);
    expect(text).not.toContain('kill');
    expect(finishes(chunks, 0)).toEqual(['content_filter']);
    expect(chunks.flatMap((c) => c.choices).some((ch) => ch.index !== 0)).toBe(false);
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 0 } });
    const [exchange] = await upstream.waitForRequests(1);
    expect(exchange?.body?.n).toBe(3);
    expect(await exchange?.settled).toBe('aborted');
  });

  it('a choice that finished normally does not keep the stream going: the flagged one ends it', async () => {
    const { chunks, text } = await stream(
      {
        pieces: [
          { index: 1, content: CLEAN },
          { index: 1, finish: 'stop' },
          { index: 0, content: VIOLENT },
        ],
      },
      2,
    );
    expect(text).not.toContain('kill');
    expect(delivered(chunks, 1)).toBe(CLEAN);
    expect(finishes(chunks, 1)).toEqual(['stop']);
    expect(finishes(chunks, 0)).toEqual(['content_filter']);
    const usage = chunks.at(-1)?.usage as { completion_tokens: number } | undefined;
    expect(usage?.completion_tokens).toBeGreaterThan(0);
    const [exchange] = await upstream.waitForRequests(1);
    expect(await exchange?.settled).toBe('aborted');
  });

  it('a flagged choice while another is still open: the other runs to its end, then the upstream stops', async () => {
    const { chunks, text } = await stream(
      {
        pieces: [
          { index: 0, content: VIOLENT },
          { index: 1, content: 'Have a lovely day, ' },
          { index: 1, content: 'and thank you for the flowers ' },
          { index: 1, content: 'you sent last week.' },
          { index: 1, finish: 'stop' },
        ],
      },
      2,
    );
    expect(text).not.toContain('kill');
    expect(finishes(chunks, 0)).toEqual(['content_filter']);
    expect(delivered(chunks, 1)).toBe(CLEAN);
    expect(finishes(chunks, 1)).toEqual(['stop']);
    expect(chunks.at(-1)).toMatchObject({ choices: [] });
    const [exchange] = await upstream.waitForRequests(1);
    expect(await exchange?.settled).toBe('aborted');
  });

  it('no choice flagged: the upstream ends the stream itself, with its own usage', async () => {
    const { chunks } = await stream(
      {
        pieces: [
          { index: 0, content: CLEAN },
          { index: 1, content: CLEAN },
          { index: 0, finish: 'stop' },
          { index: 1, finish: 'stop' },
        ],
        end: true,
      },
      2,
    );
    expect(delivered(chunks, 0)).toBe(CLEAN);
    expect(delivered(chunks, 1)).toBe(CLEAN);
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: 99 } });
    const [exchange] = await upstream.waitForRequests(1);
    expect(await exchange?.settled).toBe('finished');
  });
});
