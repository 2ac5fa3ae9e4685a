/**
 * `npm run bench:tokens`: the time of one input-token count (src/metering/tokens.ts, on the request path
 * when a price or an input-token ceiling reads it), in-process, for texts of 1 KB, 100 KB and 4 MiB:
 *   - prose: README.md repeated (words recur: mostly piece-cache hits), each run on a new slice so the
 *     whole-text cache cannot answer;
 *   - new words: random lowercase words (every piece new to the cache);
 *   - no spaces: random lowercase letters, and CJK, without a single space (one regex piece each: the
 *     case whose BPE time grew with the square of its length);
 * and the count's error against tiktoken's own encode_ordinary where that finishes in reasonable time
 * (runs without spaces: up to 20,000 characters, as tiktoken's time grows with the square of a run).
 *
 * Settings:
 *   BENCH_TOKENS_SIZES   sizes in characters (1000,20000,100000,4194304); e.g. 1000,100000 for an old build,
 *                        whose 4 MiB no-space counts take hours
 *   BENCH_TOKENS_RUNS    runs per text and size, each on a different text (5; 4 MiB: 1)
 *   BENCH_TOKENS_EXACT   largest size whose error is measured against tiktoken (100000)
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { countTextTokens, sharedEncoder } from '../providers/tokens.js';
import { envInt, envIntList } from './lib/env.js';
import { median } from './lib/stats.js';
import { table } from './lib/table.js';

const README = readFileSync(fileURLToPath(new URL('../README.md', import.meta.url)), 'utf8');
const sizes = envIntList('BENCH_TOKENS_SIZES', [1_000, 20_000, 100_000, 4 * 1024 * 1024], 64 * 1024 * 1024);
const runs = envInt('BENCH_TOKENS_RUNS', 5, 1, 1000);
const exactUpTo = envInt('BENCH_TOKENS_EXACT', 100_000, 0);

/** mulberry32: deterministic texts, so runs compare across builds. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomText(length: number, alphabet: string, seed: number): string {
  const chars = [...alphabet];
  const random = prng(seed);
  const out: string[] = [];
  for (let i = 0; i < length; i++) out.push(chars[Math.floor(random() * chars.length)] as string);
  return out.join('');
}

const KINDS: Record<string, (length: number, seed: number) => string> = {
  prose: (length, seed) => {
    const start = Math.floor(prng(seed)() * README.length);
    const text = README.slice(start) + README.repeat(Math.ceil(length / README.length) + 1);
    return text.slice(0, length);
  },
  'new words': (length, seed) => randomText(length, 'abcdefghijklmnopqrstuvwxyz     ', seed),
  'no spaces, letters': (length, seed) => randomText(length, 'abcdefghijklmnopqrstuvwxyz', seed),
  'no spaces, CJK': (length, seed) => randomText(length, '中文分词测试日本語のテキスト', seed),
};

sharedEncoder();
// Warm the JIT and the piece cache as a running gateway would be.
for (let i = 0; i < 20; i++) countTextTokens(KINDS.prose?.(20_000, 1000 + i) ?? '');

const rows: string[][] = [];
for (const [kind, make] of Object.entries(KINDS)) {
  for (const size of sizes) {
    const n = size > 1_000_000 ? 1 : runs;
    const times: number[] = [];
    let errorPct: number | undefined;
    let tokens = 0;
    for (let r = 0; r < n; r++) {
      const text = make(size, 1 + r);
      const start = performance.now();
      tokens = countTextTokens(text);
      times.push((performance.now() - start) * 1000);
      if (r === 0 && size <= (kind.startsWith('no spaces') ? Math.min(exactUpTo, 20_000) : exactUpTo)) {
        const exact = sharedEncoder().encode_ordinary(text).length;
        errorPct = ((tokens - exact) / exact) * 100;
      }
    }
    rows.push([
      kind,
      String(size),
      String(tokens),
      Math.round(median(times)).toLocaleString('en'),
      errorPct === undefined ? '-' : `${errorPct >= 0 ? '+' : ''}${errorPct.toFixed(2)}%`,
    ]);
    process.stdout.write(`${kind} ${size}: ${Math.round(median(times))} µs\n`);
  }
}
process.stdout.write(
  `\n${table('Input-token count, one text', ['text', 'characters', 'tokens', 'µs (median)', 'error vs tiktoken'], rows)}\n`,
);
