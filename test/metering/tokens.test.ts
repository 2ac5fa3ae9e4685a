import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  countChatInputTokens,
  countCompletionTokens,
  countEmbeddingInputTokens,
  countResponsesInputTokens,
  countTextTokens,
  type EncodingName,
  IMAGE_PART_TOKENS,
  sharedEncoder,
} from '../../providers/tokens.js';

/**
 * The reference is tiktoken's own encode_ordinary (Rust BPE in WASM), which does not go through our JS
 * split or caches, so comparing against it checks the fast path independently.
 */
function reference(text: string, encoding: EncodingName = 'o200k_base'): number {
  return sharedEncoder(encoding).encode_ordinary(text).length;
}

/** Deterministic PRNG (mulberry32), so a failing fuzz case can be replayed. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const README = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

const SAMPLES = [
  'Hello, world!',
  "I'LL say it's done, they've gone; we'd ſ'S he'D",
  '  leading and trailing spaces  \n\n\n  \t\r\n',
  'Numbers 1234567 3.14159 1,000,000 and ½ Ⅷ ١٢٣',
  'Ünïcödé: naïve café, Straße, Σίσυφος, Жизнь, 中文分词测试, 日本語のテキスト, 한국어 문장, مرحبا بالعالم, नमस्ते',
  'Emoji 😀👍🏽👨‍👩‍👧 and zero-width\u200Bjoin\u200D and NBSP\u00A0here and NEL\u0085there and BOM\uFEFFx',
  'special tokens are text: <|endoftext|> <|im_start|>user',
  'code: const x = (a, b) => { return a ?? b; }; // comment\n\tif (x !== y) {\n\t\treturn [1, 2, 3];\n\t}',
  'lone surrogate \uD800 and \uDC00 here',
  'https://example.com/path/to/resource?query=1&b=two#frag',
  'a'.repeat(3000),
  ' '.repeat(1000),
  README,
];

describe('sharedEncoder', () => {
  it('is built once per encoding and shared', () => {
    expect(sharedEncoder()).toBe(sharedEncoder('o200k_base'));
    expect(sharedEncoder('cl100k_base')).toBe(sharedEncoder('cl100k_base'));
    expect(sharedEncoder('cl100k_base')).not.toBe(sharedEncoder('o200k_base'));
  });
});

describe('countTextTokens', () => {
  it('matches published counts (OpenAI cookbook, cl100k_base)', () => {
    // "tiktoken is great!" → ["t", "ik", "token", " is", " great", "!"]
    expect(countTextTokens('tiktoken is great!', 'cl100k_base')).toBe(6);
    // "China is great!" → [23078, 374, 2294, 0]
    expect(countTextTokens('China is great!', 'cl100k_base')).toBe(4);
  });

  it('is 0 for the empty string', () => {
    expect(countTextTokens('')).toBe(0);
  });

  for (const encoding of ['o200k_base', 'cl100k_base'] as const) {
    it(`equals tiktoken's encode_ordinary on varied text (${encoding})`, () => {
      for (const text of SAMPLES) expect(countTextTokens(text, encoding)).toBe(reference(text, encoding));
    });

    it(`equals tiktoken's encode_ordinary on random mixed-script strings (${encoding})`, () => {
      const alphabet = [
        ...'aZq09 \t\n\r\'sStTdDlLmMvVeE.,!?/\\-_()[]{}<>|@#$%^&*~`"',
        ...'éñßΣωЖд中文のカ한국اله\u0301\u093F١٢Ⅷ½’ǅʰſ',
        '\u00A0',
        '\u2003',
        '\u3000',
        '\u0085',
        '\uFEFF',
        '\u2028',
        '\u200B',
        '\u200D',
        '😀',
        '👍🏽',
        '\uD800',
      ];
      const ascii = alphabet.filter((ch) => ch.charCodeAt(0) < 0x80);
      const random = prng(encoding === 'o200k_base' ? 1 : 2);
      for (let i = 0; i < 4000; i++) {
        // Half the strings mostly ASCII, the split's fast path, with the odd other character in between.
        const pool = i % 2 === 0 || random() < 0.1 ? alphabet : ascii;
        let text = '';
        const length = 1 + Math.floor(random() * 80);
        for (let j = 0; j < length; j++) {
          const from = pool === ascii && random() < 0.03 ? alphabet : pool;
          text += from[Math.floor(random() * from.length)];
        }
        expect([text, countTextTokens(text, encoding)]).toEqual([text, reference(text, encoding)]);
      }
    });
  }

  it('gives the same count when a long text is counted again (whole-text cache)', () => {
    const text = README.slice(0, 5000);
    const first = countTextTokens(text);
    expect(countTextTokens(text)).toBe(first);
    // a new string with the same characters hits the cache by value
    expect(countTextTokens(`${text} `.slice(0, -1))).toBe(first);
    expect(first).toBe(reference(text));
  });

  it('grows with the text: 1,000 words count more than 500', () => {
    const words = README.split(/\s+/).filter(Boolean);
    const five = words.slice(0, 500).join(' ');
    const thousand = words.slice(0, 1000).join(' ');
    expect(countTextTokens(thousand)).toBeGreaterThan(countTextTokens(five));
  });

  it('countCompletionTokens counts generated text the same way', () => {
    expect(countCompletionTokens('The answer is 42.')).toBe(reference('The answer is 42.'));
  });
});

/** `length` characters drawn from `alphabet` (code points), seeded. */
function randomText(length: number, alphabet: string, seed = 7): string {
  const chars = [...alphabet];
  const random = prng(seed);
  let text = '';
  for (let i = 0; i < length; i++) text += chars[Math.floor(random() * chars.length)];
  return text;
}

/*
 * BPE's time grows with the square of a piece's length: before long pieces were chunked, 100,000
 * characters without a space took 9-29 s and 4 MiB hours. These bounds are loose for a loaded CI box and
 * still orders of magnitude below the quadratic times.
 */
describe('long runs without spaces', () => {
  const MIB = 1024 * 1024;

  it('counts 4 MiB of letters, CJK or punctuation without a space in seconds, close to their size', () => {
    const cases = [
      { text: 'a'.repeat(4 * MIB), low: 0.1, high: 0.15 },
      { text: randomText(4 * MIB, 'abcdefghijklmnopqrstuvwxyz'), low: 0.4, high: 0.6 },
      { text: randomText(1.4 * MIB, '中文分词测试日本語'), low: 0.8, high: 1.1 },
      { text: randomText(4 * MIB, '.,;:!?-_()'), low: 0.45, high: 0.65 },
    ];
    for (const { text, low, high } of cases) {
      const start = performance.now();
      const tokens = countTextTokens(text);
      const ms = performance.now() - start;
      console.log(
        `${text.length} characters (${text.slice(0, 3)}...): ${tokens} tokens in ${ms.toFixed(0)} ms`,
      );
      expect(ms).toBeLessThan(5_000);
      expect(tokens / text.length).toBeGreaterThan(low);
      expect(tokens / text.length).toBeLessThan(high);
    }
  });

  it('counts a 20,000-character run within 1% of tiktoken, never below it', () => {
    for (const text of [
      randomText(20_000, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'),
      randomText(6_000, '中文分词测试日本語のテキスト😀👍🏽'),
      'Donaudampfschifffahrtsgesellschaftskapitän'.repeat(100),
    ]) {
      for (const encoding of ['o200k_base', 'cl100k_base'] as const) {
        const exact = reference(text, encoding);
        const counted = countTextTokens(text, encoding);
        expect(counted).toBeGreaterThanOrEqual(exact);
        expect(counted).toBeLessThanOrEqual(exact * 1.02);
      }
    }
  });

  it('estimates past its budget within 10% on a 1 MiB text of new words', () => {
    const text = randomText(MIB, 'abcdefghijklmnopqrstuvwxyz     ', 11);
    const exact = reference(text);
    const counted = countTextTokens(text);
    expect(Math.abs(counted - exact) / exact).toBeLessThan(0.1);
    // Counting again hits more cached words (fewer estimated ones): still close.
    expect(Math.abs(countTextTokens(text) - exact) / exact).toBeLessThan(0.1);
  });

  it('shares one budget across the texts of one request', () => {
    const part = randomText(64 * 1024, 'abcdefghijklmnopqrstuvwxyz     ', 13);
    const parts = Array.from({ length: 32 }, (_, i) => `${i} ${part}`);
    const start = performance.now();
    const tokens = countEmbeddingInputTokens(parts);
    const oneRequest = performance.now() - start;
    expect(tokens).toBeGreaterThan(0);
    // 32 texts each under the exact budget would be encoded whole if each had its own
    expect(oneRequest).toBeLessThan(3_000);
  });
});

describe('countChatInputTokens', () => {
  it("follows the cookbook: [{role:'user',content:'hi'}] is 3 + 1 + 1 + 3 = 8", () => {
    expect(reference('user')).toBe(1);
    expect(reference('hi')).toBe(1);
    expect(countChatInputTokens([{ role: 'user', content: 'hi' }])).toBe(8);
  });

  it('adds up: 3 priming + per message 3 + role + content (+ 1 + name)', () => {
    const messages = [
      { role: 'system', content: 'You are a terse assistant.' },
      { role: 'user', name: 'ada', content: 'What is the capital of France?' },
      { role: 'assistant', content: 'Paris.' },
      { role: 'user', content: README.slice(0, 2000) },
    ];
    let expected = 3;
    for (const m of messages) {
      expected += 3 + reference(m.role) + reference(m.content);
      if (m.name) expected += 1 + reference(m.name);
    }
    expect(countChatInputTokens(messages)).toBe(expected);
    // each message's share is independent of the others
    const first = countChatInputTokens(messages.slice(0, 2));
    const rest = countChatInputTokens(messages.slice(2));
    expect(first + rest - 3).toBe(expected);
  });

  it('counts text parts and a fixed estimate per image part', () => {
    const messages = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Describe this image.' },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
          { type: 'text', text: 'And this one.' },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
          { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } },
        ],
      },
    ];
    const expected =
      3 + 3 + reference('user') + reference('Describe this image.') + reference('And this one.') + 2 * 85;
    expect(IMAGE_PART_TOKENS).toBe(85);
    expect(countChatInputTokens(messages)).toBe(expected);
  });

  it('counts tool calls and tool definitions as their JSON text', () => {
    const toolCalls = [
      { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
    ];
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];
    const messages = [{ role: 'assistant', content: null, tool_calls: toolCalls }];
    const expected =
      3 +
      reference(JSON.stringify(tools)) +
      3 +
      reference('assistant') +
      reference(JSON.stringify(toolCalls));
    expect(countChatInputTokens(messages, { tools })).toBe(expected);
  });

  it('counts an image part at its fixed cost, not its data: URI (a 1 MB one too)', () => {
    const url = `data:image/png;base64,${Buffer.alloc(750_000, 7).toString('base64')}`;
    expect(url.length).toBeGreaterThan(1_000_000);
    const text = { type: 'text', text: 'What is this?' };
    const withImage = countChatInputTokens([
      { role: 'user', content: [text, { type: 'image_url', image_url: { url, detail: 'high' } }] },
    ]);
    expect(withImage).toBe(countChatInputTokens([{ role: 'user', content: [text] }]) + IMAGE_PART_TOKENS);
  });

  it('skips what is not a message, and counts with cl100k_base on request', () => {
    expect(countChatInputTokens('nope')).toBe(3);
    expect(countChatInputTokens([null, 7, { role: 'user', content: 'hi' }])).toBe(8);
    const text = 'tiktoken is great!';
    expect(countChatInputTokens([{ role: 'user', content: text }], { encoding: 'cl100k_base' })).toBe(
      3 + 3 + reference('user', 'cl100k_base') + 6,
    );
  });
});

describe('countResponsesInputTokens', () => {
  it('counts a string input as one user message, like the chat it is bridged to', () => {
    expect(countResponsesInputTokens('hi')).toBe(countChatInputTokens([{ role: 'user', content: 'hi' }]));
    expect(countResponsesInputTokens('hi')).toBe(8);
  });

  it('adds instructions as a system message and previous turns as messages', () => {
    const previous = [
      { role: 'user', content: 'My name is Ada.' },
      { role: 'assistant', content: 'Hello Ada.' },
    ];
    const chat = countChatInputTokens([
      { role: 'system', content: 'Be brief.' },
      ...previous,
      { role: 'user', content: 'What is my name?' },
    ]);
    expect(countResponsesInputTokens('What is my name?', 'Be brief.', previous)).toBe(chat);
  });

  it('counts message items with content parts', () => {
    const input = [
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello there' }] },
      { role: 'assistant', content: [{ type: 'output_text', text: 'Hi!' }] },
      { role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/a.png' }] },
    ];
    const expected =
      3 +
      (3 + reference('user') + reference('Hello there')) +
      (3 + reference('assistant') + reference('Hi!')) +
      (3 + reference('user') + 85);
    expect(countResponsesInputTokens(input)).toBe(expected);
  });

  it('counts function calls and their outputs by their text', () => {
    const input = [
      { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'c1', output: '{"temp":21}' },
    ];
    const expected =
      3 + (3 + reference('get_weather') + reference('{"city":"Paris"}')) + (3 + reference('{"temp":21}'));
    expect(countResponsesInputTokens(input)).toBe(expected);
  });
});

describe('countResponsesInputTokens: tools and images', () => {
  it('counts tool definitions as their JSON text, as chat does', () => {
    const tools = [
      {
        type: 'function',
        name: 'get_weather',
        description: 'Weather of a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    ];
    expect(countResponsesInputTokens('hi', undefined, undefined, tools)).toBe(
      countResponsesInputTokens('hi') + reference(JSON.stringify(tools)),
    );
    expect(countResponsesInputTokens('hi', undefined, undefined, [])).toBe(countResponsesInputTokens('hi'));
  });

  it('counts an image in a function_call_output at its fixed cost, not its data: URI as JSON text', () => {
    const url = `data:image/png;base64,${Buffer.alloc(750_000, 7).toString('base64')}`;
    const input = [
      {
        type: 'function_call_output',
        call_id: 'c1',
        output: [
          { type: 'input_text', text: 'the chart' },
          { type: 'input_image', image_url: url },
        ],
      },
    ];
    expect(countResponsesInputTokens(input)).toBe(3 + 3 + reference('the chart') + IMAGE_PART_TOKENS);
    const inMessage = [{ role: 'user', content: [{ type: 'input_image', image_url: url }] }];
    expect(countResponsesInputTokens(inMessage)).toBe(3 + 3 + reference('user') + IMAGE_PART_TOKENS);
  });
});

describe('countEmbeddingInputTokens', () => {
  it('counts a string, sums a string array, and counts token ids by length', () => {
    expect(countEmbeddingInputTokens('hello world')).toBe(reference('hello world'));
    expect(countEmbeddingInputTokens(['hello world', 'goodbye'])).toBe(
      reference('hello world') + reference('goodbye'),
    );
    expect(countEmbeddingInputTokens([15339, 1917, 0])).toBe(3);
    expect(
      countEmbeddingInputTokens([
        [1, 2],
        [3, 4, 5],
      ]),
    ).toBe(5);
    expect(countEmbeddingInputTokens(undefined)).toBe(0);
    expect(countEmbeddingInputTokens('')).toBe(0);
  });
});

/*
 * Speed of countChatInputTokens on a ~1,150-token chat (9 messages of README text: English, markdown and
 * code), on the 2-core dev box while other jobs kept it loaded (load average 5-7; an idle box does better):
 *   tiktoken encode_ordinary of each message (the baseline):   1.2-2.7 ms
 *   a new chat (strings never counted; piece cache warm):      ~0.2 ms (0.1 ms over a 3,000-chat loop)
 *   the same chat again (a next turn resends it):               0.003-0.05 ms
 *   a chat in the process's first moments (cold JIT, new vocabulary): 0.3-1.7 ms, plus the encoder build
 *   (~300 ms idle, 0.6-1.7 s loaded) unless sharedEncoder() was called at start-up.
 * The test prints the numbers of the current run.
 */
describe('speed', () => {
  function chatOf(offset: number): Array<{ role: string; content: string }> {
    const messages = [{ role: 'system', content: README.slice(offset, offset + 600) }];
    for (let i = 0; i < 8; i++) {
      const start = offset + 600 + i * 450;
      messages.push({ role: i % 2 === 0 ? 'user' : 'assistant', content: README.slice(start, start + 450) });
    }
    return messages;
  }

  function msPerCall(fn: (i: number) => void, runs: number): number {
    const start = performance.now();
    for (let i = 0; i < runs; i++) fn(i);
    return (performance.now() - start) / runs;
  }

  it('counts a 1,000-token chat well under 1 ms once warm', () => {
    const first = chatOf(0);
    const coldStart = performance.now();
    const tokens = countChatInputTokens(first);
    const cold = performance.now() - coldStart;
    expect(tokens).toBeGreaterThan(800);
    expect(tokens).toBeLessThan(1400);

    // A running gateway has seen the common words: warm the piece cache and the JIT on other strings.
    countTextTokens(README);
    const warmup = Array.from({ length: 200 }, (_, i) => chatOf((3 + i * 59) % 9000));
    for (const chat of warmup) countChatInputTokens(chat);

    // New chats: strings never counted before, so the whole-text cache cannot help.
    const fresh = Array.from({ length: 200 }, (_, i) => chatOf((5 + i * 53) % 9000));
    const baseline = msPerCall((i) => {
      for (const m of fresh[i]!) reference(m.content);
    }, fresh.length);
    const newChat = msPerCall((i) => countChatInputTokens(fresh[i]), fresh.length);
    const resent = msPerCall(() => countChatInputTokens(first), 200);
    console.log(
      `${tokens}-token chat: tiktoken baseline ${baseline.toFixed(3)} ms, first count ${cold.toFixed(3)} ms, ` +
        `new chat ${newChat.toFixed(3)} ms, resent ${resent.toFixed(3)} ms`,
    );
    // Loose bounds: catch an order-of-magnitude regression without failing on a busy CI machine.
    expect(resent).toBeLessThan(1);
    expect(newChat).toBeLessThan(5);
  });
});
