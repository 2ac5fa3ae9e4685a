/**
 * Token counting with OpenAI's BPE encodings (the `tiktoken` WASM package), for admission estimates and
 * for usage when an upstream does not report it. One encoder per encoding per process, built on first use
 * (~300 ms), never per request.
 *
 * Speed: tiktoken's WASM costs 1-2.5 µs per token on the 2-core box (a 1,000-token chat: 1.2-2.7 ms), over
 * the hot-path budget. tiktoken itself splits text with the encoding's regex and byte-pair-encodes each
 * piece on its own, so a text's count is the sum of its pieces' counts. We split in JS with the same
 * pattern (translated below; an ASCII-only variant, ~9x faster in V8, for ASCII stretches) and remember
 * each piece's count: words recur, so most pieces are a Map hit and only new ones go to WASM. Texts of
 * 256+ characters are remembered whole too, as chat histories are resent every turn. Both memories are
 * two-generation caches with fixed bounds. A new 1,000-token chat then takes ~0.1-0.2 ms, a resent one
 * ~0.01 ms. test/metering/tokens.test.ts checks the split against tiktoken's own count on mixed-script
 * and random text, and prints the timings.
 *
 * Chat accounting is OpenAI's cookbook rule (num_tokens_from_messages): 3 tokens per message, plus the
 * tokens of its role and content, plus 1 and the name's tokens for `name`, plus 3 priming the reply. Beyond
 * the cookbook (estimates): content-part arrays count each text part; an image part counts
 * IMAGE_PART_TOKENS (85, OpenAI's low-detail image cost; real costs grow with size and detail); other parts
 * (audio, files) count 0, whatever their size (a data: URI's base64 is never counted as text);
 * `tool_calls` and tool definitions (chat and Responses `tools`) count as their JSON text, as
 * providers/local.ts does (which, unlike this, joins text parts with newlines).
 * Special-token text such as `<|endoftext|>` in user input counts as ordinary text, as tiktoken's
 * encode_ordinary does.
 */
import { get_encoding, type Tiktoken } from 'tiktoken';

export type EncodingName = 'o200k_base' | 'cl100k_base';

export const DEFAULT_ENCODING: EncodingName = 'o200k_base';
export const TOKENS_PER_MESSAGE = 3;
export const TOKENS_PER_NAME = 1;
export const REPLY_PRIMING_TOKENS = 3;
export const IMAGE_PART_TOKENS = 85;

/** Pieces longer than this (long digit-free runs, base64) rarely recur: count them, do not keep them. */
const MAX_CACHED_PIECE = 48;
const PIECE_CACHE_ENTRIES = 50_000;
/**
 * Texts at least this long are remembered whole: a map lookup costs far less than splitting even a
 * sentence into pieces (a repeated 60-character system prompt: ~1.5 us split, ~0.1 us looked up).
 */
const MIN_CACHED_TEXT = 32;
const TEXT_CACHE_CHARS = 4_000_000;
/** A text entry's weight beyond its characters (the map entry itself), so short texts stay bounded too. */
const TEXT_ENTRY_OVERHEAD = 64;

/**
 * Recently used counts in two generations: when the young one is full it becomes the old one, so a hot
 * entry survives one rotation by being read. Bounded by entries, or by key characters when `byLength`.
 */
class TwoGenerationCache {
  private young = new Map<string, number>();
  private old = new Map<string, number>();
  private weight = 0;

  constructor(
    private readonly capacity: number,
    private readonly byLength = false,
  ) {}

  get(key: string): number | undefined {
    const hit = this.young.get(key);
    if (hit !== undefined) return hit;
    const old = this.old.get(key);
    if (old !== undefined) this.set(key, old);
    return old;
  }

  set(key: string, value: number): void {
    const weight = this.byLength ? key.length + TEXT_ENTRY_OVERHEAD : 1;
    if (this.weight + weight > this.capacity) {
      this.old = this.young;
      this.young = new Map();
      this.weight = 0;
    }
    this.young.set(key, value);
    this.weight += weight;
  }
}

// tiktoken's split patterns (Rust regex syntax) in JS syntax, twice: over Unicode classes, and over
// their ASCII parts for ASCII-only text, where V8 runs ~9x faster without the `u` flag. `\s` is spelled
// out: Rust's Unicode White_Space has U+0085 and lacks U+FEFF, JS's `\s` the reverse. `(?i:'s|...)` has
// no JS form before ES2025: the letters are spelled in both cases (and ſ, which case-folds to s).
interface Classes {
  letter: string;
  digit: string;
  upper: string;
  lower: string;
  space: string;
}
const UNICODE: Classes = {
  letter: '\\p{L}',
  digit: '\\p{N}',
  upper: '\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}',
  lower: '\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}',
  space: '\\t\\n\\v\\f\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000',
};
const ASCII: Classes = {
  letter: 'a-zA-Z',
  digit: '0-9',
  upper: 'A-Z',
  lower: 'a-z',
  space: '\\t\\n\\v\\f\\r ',
};
const CONTRACTION = "'(?:[sS\\u017F]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])";

const PATTERNS: Record<EncodingName, (k: Classes) => string> = {
  o200k_base: (k) =>
    [
      `[^\\r\\n${k.letter}${k.digit}]?[${k.upper}]*[${k.lower}]+(?:${CONTRACTION})?`,
      `[^\\r\\n${k.letter}${k.digit}]?[${k.upper}]+[${k.lower}]*(?:${CONTRACTION})?`,
      `[${k.digit}]{1,3}`,
      ` ?[^${k.space}${k.letter}${k.digit}]+[\\r\\n/]*`,
      `[${k.space}]*[\\r\\n]+`,
      `[${k.space}]+(?![^${k.space}])`,
      `[${k.space}]+`,
    ].join('|'),
  cl100k_base: (k) =>
    [
      CONTRACTION,
      `[^\\r\\n${k.letter}${k.digit}]?[${k.letter}]+`,
      `[${k.digit}]{1,3}`,
      ` ?[^${k.space}${k.letter}${k.digit}]+[\\r\\n]*`,
      `[${k.space}]*[\\r\\n]+`,
      `[${k.space}]+(?![^${k.space}])`,
      `[${k.space}]+`,
    ].join('|'),
};

const NON_ASCII = /[\u0080-\uffff]/g;

/** Rust's `\s` (Unicode White_Space), as a char code test. */
function isSpace(code: number): boolean {
  if (code <= 0x20) return code === 0x20 || (code >= 0x09 && code <= 0x0d);
  if (code < 0x85) return false;
  return (
    code === 0x85 ||
    code === 0xa0 ||
    code === 0x1680 ||
    (code >= 0x2000 && code <= 0x200a) ||
    code === 0x2028 ||
    code === 0x2029 ||
    code === 0x202f ||
    code === 0x205f ||
    code === 0x3000
  );
}

/**
 * Both patterns keep whitespace only at the start of a piece or in a whitespace-only piece (plus trailing
 * newlines), so a space right after a non-space always starts a new piece: text cut there splits exactly
 * as it would whole. These finders return such cut points around a non-ASCII character.
 */
function cutBefore(text: string, index: number, floor: number): number {
  for (let b = text.lastIndexOf(' ', index); b > floor; b = text.lastIndexOf(' ', b - 1)) {
    if (!isSpace(text.charCodeAt(b - 1))) return b;
  }
  return floor;
}

function cutAfter(text: string, index: number): number {
  for (let b = text.indexOf(' ', index); b !== -1; b = text.indexOf(' ', b + 1)) {
    if (!isSpace(text.charCodeAt(b - 1))) return b;
  }
  return text.length;
}

interface Counter {
  encoder: Tiktoken;
  unicodePieces: RegExp;
  asciiPieces: RegExp;
  pieceCounts: TwoGenerationCache;
  textCounts: TwoGenerationCache;
}

const counters = new Map<EncodingName, Counter>();

function counter(name: EncodingName): Counter {
  let c = counters.get(name);
  if (!c) {
    c = {
      encoder: get_encoding(name),
      unicodePieces: new RegExp(PATTERNS[name](UNICODE), 'gu'),
      asciiPieces: new RegExp(PATTERNS[name](ASCII), 'g'),
      pieceCounts: new TwoGenerationCache(PIECE_CACHE_ENTRIES),
      textCounts: new TwoGenerationCache(TEXT_CACHE_CHARS, true),
    };
    counters.set(name, c);
  }
  return c;
}

/**
 * The process's encoder for `name` (default o200k_base), built on first call. Shared: never `free()` it.
 * For counting prefer the functions below, which are faster than `encode_ordinary(text).length`.
 */
export function sharedEncoder(name: EncodingName = DEFAULT_ENCODING): Tiktoken {
  return counter(name).encoder;
}

/**
 * The WASM work of one count (a request's input, or one completion), so that no text, however built,
 * blocks the event loop for long: BPE's time grows with the square of a piece's length (one
 * 100,000-character run without a space took seconds, a 4 MiB one hours), and even linear work on a
 * 4 MiB body of new words or CJK takes 2-4 s. Two bounds:
 * - a piece longer than PIECE_CHUNK is encoded in chunks of that size (never splitting a surrogate
 *   pair), which keeps the work linear; each cut can split one token in two, so the count errs upward by
 *   at most about one token per chunk (bench/tokens.ts measures it: about +0.3% on random letters, 0 on
 *   CJK and emoji);
 * - once EXACT_CHARS characters went to WASM in this count, only one uncached piece or chunk in
 *   SAMPLE_EVERY is encoded; the others are estimated at the tokens per character of the last one
 *   encoded (the neighbouring text), and are not remembered in the piece cache. Ordinary text rarely gets
 *   there: its words are cache hits, which cost no budget.
 */
const PIECE_CHUNK = 128;
const EXACT_CHARS = 64 * 1024;
const SAMPLE_EVERY = 16;
const MAX_SEGMENT = 64 * 1024;

export class TokenBudget {
  encodedChars = 0;
  skipped = 0;
  /** Tokens per character of the last piece or chunk encoded. */
  ratio = 0.25;
  /** Whether the last countPart() was estimated rather than encoded. */
  lastEstimated = false;
  /** Whether any part of this count was estimated. */
  estimated = false;
}

function countPart(c: Counter, budget: TokenBudget, part: string): number {
  if (budget.encodedChars >= EXACT_CHARS && ++budget.skipped < SAMPLE_EVERY) {
    budget.lastEstimated = true;
    budget.estimated = true;
    return Math.max(1, Math.round(part.length * budget.ratio));
  }
  const n = c.encoder.encode_ordinary(part).length;
  budget.skipped = 0;
  budget.encodedChars += part.length;
  budget.ratio = n / part.length;
  budget.lastEstimated = false;
  return n;
}

function countLongPiece(c: Counter, budget: TokenBudget, piece: string): number {
  let total = 0;
  for (let start = 0; start < piece.length; ) {
    let end = Math.min(start + PIECE_CHUNK, piece.length);
    const last = piece.charCodeAt(end - 1);
    if (end < piece.length && last >= 0xd800 && last <= 0xdbff) end--;
    total += countPart(c, budget, piece.slice(start, end));
    start = end;
  }
  return total;
}

/**
 * Where the segment of `text` from `pos` ends: the regexes overflow V8's backtracking stack on runs of
 * millions of characters (4 Mi CJK characters did), so they never see more than MAX_SEGMENT at once. A
 * cut at a space after a non-space splits exactly (see cutBefore); a run with none is cut anyway, which
 * splits one piece in two, as PIECE_CHUNK does.
 */
function segmentEnd(text: string, pos: number): number {
  if (text.length - pos <= MAX_SEGMENT) return text.length;
  const limit = pos + MAX_SEGMENT;
  const floor = pos + MAX_SEGMENT / 2;
  const cut = cutBefore(text, limit, floor);
  if (cut > floor) return cut;
  const last = text.charCodeAt(limit - 1);
  return last >= 0xd800 && last <= 0xdbff ? limit - 1 : limit;
}

function countRun(c: Counter, budget: TokenBudget, re: RegExp, text: string): number {
  if (text.length <= MAX_SEGMENT) return countSegment(c, budget, re, text);
  let total = 0;
  for (let pos = 0; pos < text.length; ) {
    const end = segmentEnd(text, pos);
    total += countSegment(c, budget, re, text.slice(pos, end));
    pos = end;
  }
  return total;
}

function countSegment(c: Counter, budget: TokenBudget, re: RegExp, text: string): number {
  re.lastIndex = 0;
  let total = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const piece = m[0];
    if (piece.length > PIECE_CHUNK) {
      total += countLongPiece(c, budget, piece);
      continue;
    }
    let n = c.pieceCounts.get(piece);
    if (n === undefined) {
      n = countPart(c, budget, piece);
      if (piece.length <= MAX_CACHED_PIECE && !budget.lastEstimated) c.pieceCounts.set(piece, n);
    }
    total += n;
  }
  return total;
}

/** ASCII stretches go through the fast pattern, the stretches around other characters the full one. */
function countPieces(c: Counter, budget: TokenBudget, text: string): number {
  let total = 0;
  let pos = 0;
  while (pos < text.length) {
    NON_ASCII.lastIndex = pos;
    const hit = NON_ASCII.exec(text);
    if (hit === null) return total + countRun(c, budget, c.asciiPieces, pos === 0 ? text : text.slice(pos));
    const start = cutBefore(text, hit.index, pos);
    const end = cutAfter(text, hit.index + 1);
    if (start > pos) total += countRun(c, budget, c.asciiPieces, text.slice(pos, start));
    total += countRun(c, budget, c.unicodePieces, text.slice(start, end));
    pos = end;
  }
  return total;
}

/**
 * Tokens in `text`, as tiktoken's encode_ordinary(text).length, within `budget` (TokenBudget: pass one
 * budget to every text of one request). Exact unless a piece is longer than PIECE_CHUNK or the budget
 * ran out.
 */
export function countTextTokens(
  text: string,
  encoding: EncodingName = DEFAULT_ENCODING,
  budget: TokenBudget = new TokenBudget(),
): number {
  if (text.length === 0) return 0;
  const c = counter(encoding);
  if (text.length < MIN_CACHED_TEXT) return countPieces(c, budget, text);
  let n = c.textCounts.get(text);
  if (n === undefined) {
    const estimatedBefore = budget.estimated;
    budget.estimated = false;
    n = countPieces(c, budget, text);
    // A text larger than the whole cache would only evict everything else; an estimate depends on
    // what else the request held, so it is not kept either.
    if (text.length <= TEXT_CACHE_CHARS / 4 && !budget.estimated) c.textCounts.set(text, n);
    budget.estimated ||= estimatedBefore;
  }
  return n;
}

/** Tokens of generated text. */
export function countCompletionTokens(text: string, encoding: EncodingName = DEFAULT_ENCODING): number {
  return countTextTokens(text, encoding);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** The encoding and the one budget of a count of several texts (a request's input). */
interface Count {
  enc: EncodingName;
  budget: TokenBudget;
}

function newCount(enc: EncodingName): Count {
  return { enc, budget: new TokenBudget() };
}

const IMAGE_PARTS = new Set(['image_url', 'input_image', 'image']);

/** Content as a string or an array of parts (chat: text/image_url; Responses: input_text/output_text…). */
function contentTokens(content: unknown, k: Count): number {
  if (typeof content === 'string') return countTextTokens(content, k.enc, k.budget);
  if (!Array.isArray(content)) return 0;
  let total = 0;
  for (const part of content) {
    if (typeof part === 'string') total += countTextTokens(part, k.enc, k.budget);
    else if (!isObject(part)) continue;
    else if (typeof part.text === 'string') total += countTextTokens(part.text, k.enc, k.budget);
    else if (typeof part.refusal === 'string') total += countTextTokens(part.refusal, k.enc, k.budget);
    else if (typeof part.type === 'string' && IMAGE_PARTS.has(part.type)) total += IMAGE_PART_TOKENS;
  }
  return total;
}

function jsonTokens(value: unknown, k: Count): number {
  if (value === undefined || value === null) return 0;
  if (Array.isArray(value) && value.length === 0) return 0;
  return countTextTokens(JSON.stringify(value), k.enc, k.budget);
}

function messageTokens(message: Record<string, unknown>, k: Count): number {
  let total = TOKENS_PER_MESSAGE + contentTokens(message.content, k);
  if (typeof message.role === 'string') total += countTextTokens(message.role, k.enc, k.budget);
  if (typeof message.name === 'string')
    total += TOKENS_PER_NAME + countTextTokens(message.name, k.enc, k.budget);
  return total + jsonTokens(message.tool_calls, k);
}

export interface ChatCountOptions {
  /** The request's `tools`, counted as their JSON text. */
  tools?: unknown;
  encoding?: EncodingName;
}

/** Prompt tokens of a chat request's `messages` (non-objects are skipped). */
export function countChatInputTokens(messages: unknown, options: ChatCountOptions = {}): number {
  const k = newCount(options.encoding ?? DEFAULT_ENCODING);
  let total = REPLY_PRIMING_TOKENS + jsonTokens(options.tools, k);
  if (!Array.isArray(messages)) return total;
  for (const m of messages) if (isObject(m)) total += messageTokens(m, k);
  return total;
}

/** One Responses input item as a chat message would count; unknown item types count as JSON text. */
function itemTokens(item: unknown, k: Count): number {
  if (typeof item === 'string') return TOKENS_PER_MESSAGE + countTextTokens(item, k.enc, k.budget);
  if (!isObject(item)) return 0;
  const type = item.type ?? 'message';
  if (type === 'message') return messageTokens(item, k);
  if (type === 'function_call') {
    return (
      TOKENS_PER_MESSAGE +
      countTextTokens(String(item.name ?? ''), k.enc, k.budget) +
      textOrJson(item.arguments, k)
    );
  }
  if (type === 'function_call_output') {
    // The output is a string or, like a message's content, parts (input_text, input_image, input_file):
    // an image part costs IMAGE_PART_TOKENS, not its data: URI as JSON text.
    const output = item.output;
    return TOKENS_PER_MESSAGE + (Array.isArray(output) ? contentTokens(output, k) : textOrJson(output, k));
  }
  return TOKENS_PER_MESSAGE + jsonTokens(item, k);
}

function textOrJson(value: unknown, k: Count): number {
  return typeof value === 'string' ? countTextTokens(value, k.enc, k.budget) : jsonTokens(value, k);
}

/**
 * Prompt tokens of a Responses request, counted as the chat request it is bridged to
 * (src/responses/bridge.ts): `tools` as their JSON text, `instructions` as a system message, then
 * `previous` (the history behind previous_response_id), then `input` (a string is one user message).
 */
export function countResponsesInputTokens(
  input: unknown,
  instructions?: string,
  previous?: ReadonlyArray<{ role: string; content: unknown }>,
  tools?: unknown,
  encoding: EncodingName = DEFAULT_ENCODING,
): number {
  const k = newCount(encoding);
  let total = REPLY_PRIMING_TOKENS + jsonTokens(tools, k);
  if (instructions) total += messageTokens({ role: 'system', content: instructions }, k);
  for (const m of previous ?? []) total += messageTokens(m, k);
  if (typeof input === 'string') return total + messageTokens({ role: 'user', content: input }, k);
  if (Array.isArray(input)) for (const item of input) total += itemTokens(item, k);
  return total;
}

/**
 * Tokens of an embeddings `input`: a string, an array of strings, a token-id array (its length) or an
 * array of token-id arrays. No per-input overhead: OpenAI reports embeddings usage as the plain sum.
 */
export function countEmbeddingInputTokens(input: unknown, encoding: EncodingName = DEFAULT_ENCODING): number {
  if (typeof input === 'string') return countTextTokens(input, encoding);
  if (!Array.isArray(input)) return 0;
  const budget = new TokenBudget();
  let total = 0;
  for (const item of input) {
    if (typeof item === 'string') total += countTextTokens(item, encoding, budget);
    else if (typeof item === 'number') total += 1;
    else if (Array.isArray(item)) total += item.length;
  }
  return total;
}
