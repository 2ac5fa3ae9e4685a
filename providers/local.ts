import { randomUUID } from 'node:crypto';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import type { Tiktoken } from 'tiktoken';
import { countImages, type LocalReply, type LocalToolCall, localReply, messageText } from './local/reply.js';
import { invalidParameter, type ProviderRequestError } from './request-error.js';
import { countTextTokens, IMAGE_PART_TOKENS, sharedEncoder, TokenBudget } from './tokens.js';
import type { CallContext, InferenceProvider, JsonObject, ProviderResult, SseEvent } from './types.js';
import { UpstreamError } from './upstream-error.js';

/**
 * Gantry's built-in models: no network, no weights, fully deterministic, but speaking the OpenAI wire
 * format exactly, so the embedded default and the tests exercise every code path a real upstream does.
 *
 * Chat reply rules (what end-to-end tests and users can assert on), the first that applies:
 * 1. Tool calls: the request has function `tools`, `tool_choice` is not `none`, and the last message is
 *    not a `tool` result. It calls the tool `tool_choice` names; otherwise (auto, required, absent, or
 *    allowed_tools among the tools it lists) every tool whose name the last user message contains
 *    (its first TOOL_NAME_SEARCH_CHARS characters; case-insensitive, in `tools` order; only the first when `parallel_tool_calls` is false), or the
 *    first tool when it names none. The arguments are the
 *    deterministic instance of the tool's `parameters` (local/schema-instance.ts: required properties,
 *    first enum values, strings from the last user message, numbers 0 or the minimum; bounded in work
 *    and size over the whole reply, see its header). `content` is null,
 *    ids are `call_…`, finish_reason `tool_calls`; streamed as OpenAI does (per call a first delta with
 *    index, id, type and name with empty arguments, then the arguments in pieces).
 * 2. `response_format` json_schema: the content is the same generator's instance of the schema (valid
 *    against it); json_object: `{"you_said":"<last user text>"}`.
 * 3. After tool results (the last message is a `tool` message): one line per trailing tool message,
 *    `Tool <function name> returned: <content>`, then `\n` + LOCAL_REPLY_SUFFIX.
 * 4. Otherwise: `You said: <text of the last user message>\n`, then `Images received: <n>\n` when the
 *    request holds n > 0 `image_url` parts (over all messages; URLs are never fetched), then
 *    LOCAL_REPLY_SUFFIX. The text is the message's string content, or its `text` parts joined with `\n`;
 *    with no user message it is empty.
 * Then, as a model would: generation ends before the first `stop` sequence (finish_reason `stop`), or
 * after `max_completion_tokens` / `max_tokens` o200k tokens (finish_reason `length`; tool call arguments
 * count and are cut the same way). All `n` choices are identical. Sampling parameters and
 * `reasoning_effort` are accepted and ignored (no reasoning tokens). Prompt tokens: OpenAI's per-message
 * rule (countPromptTokens below), tool definitions and calls as their JSON text, each image part
 * IMAGE_PART_TOKENS (OpenAI's low-detail cost), as the gateway's estimate counts them (tokens.ts).
 *
 * Embeddings: random indexing, i.e. feature hashing with a dense pseudo-random vector per feature,
 * summed and L2-normalised. Features are the lowercased words (common function words damped), their
 * character trigrams, and word bigrams. Texts sharing words or word stems point the same way; identical
 * texts give identical vectors. Dense rather than one signed slot per feature, so any prefix of the
 * vector is itself a usable embedding: `dimensions` truncates and re-normalises (Matryoshka-style)
 * without landing on an all-zero prefix. Token-id inputs are decoded with o200k first, so
 * `[ids of "hello"]` embeds exactly like `"hello"`. Values are float32, in both encodings.
 *
 * Bounds, as a real model's context and output limits (else one request echoes megabytes back): a chat
 * prompt, or an embeddings request's inputs together, over `contextLength` tokens is refused as OpenAI
 * refuses it (400, code context_length_exceeded, param `messages` or `input`); a chat answer generates at
 * most `maxOutputTokens` tokens over all its `n` choices (each choice gets its share, finish_reason
 * `length`); an embeddings request takes at most LOCAL_EMBEDDING_MAX_INPUTS inputs, as OpenAI's does.
 */

export {
  LOCAL_IMAGES_PREFIX,
  LOCAL_REPLY_PREFIX,
  LOCAL_REPLY_SUFFIX,
  LOCAL_TOOL_RESULT_PREFIX,
  localReplyText,
} from './local/reply.js';
export const LOCAL_EMBEDDING_DIMENSIONS = 256;
export const LOCAL_CONTEXT_LENGTH = 128_000;
export const LOCAL_MAX_OUTPUT_TOKENS = 4096;
/** OpenAI's limit on the inputs of one embeddings request. */
export const LOCAL_EMBEDDING_MAX_INPUTS = 2048;

export interface LocalProviderConfig {
  name: string;
  /** Native size of the embedding vectors. */
  embeddingDimensions?: number;
  /** Pause between streamed chunks; 0 still yields to the event loop between chunks. */
  chunkDelayMs?: number;
  /** The most prompt tokens of a chat request, or input tokens of an embeddings request. */
  contextLength?: number;
  /** The most tokens one chat answer generates, all its choices together. */
  maxOutputTokens?: number;
}

const SYSTEM_FINGERPRINT = 'fp_gantry_local';
/** Tokens per streamed content delta: several, so chunk boundaries are visible but streams stay short. */
const TOKENS_PER_CHUNK = 3;
/** o200k_base: ids 0..199997 are ordinary tokens; the only specials are these two. */
const O200K_ORDINARY_TOKENS = 199_998;
const O200K_SPECIAL_TOKENS = new Set([199_999, 200_018]);
const BIGRAM_WEIGHT = 0.5;
const TRIGRAM_WEIGHT = 0.7;
const STOP_WORD_WEIGHT = 0.2;
const STOP_WORDS = new Set(
  (
    'a an and are as at be by can could did do does for from had has have how i in is it its me my no not of ' +
    'on or our so than that the their them then there these they this to was we were what when where which ' +
    'who why will with would you your'
  ).split(' '),
);

/** The process's one o200k encoder (~300 ms to build, tables in WASM memory), shared with metering. */
function o200k(): Tiktoken {
  return sharedEncoder('o200k_base');
}

/** Characters per encode call in generate(): BPE's time grows with the square of a piece's length. */
const ENCODE_CHUNK = 256;

/**
 * Token ids of `text` as encode_ordinary gives them, encoded in chunks cut at a space after a non-space
 * (where the split is exact; a run without one is cut anyway), stopping once more than `limit` are had.
 */
function encodeUpTo(text: string, limit: number): number[] {
  const enc = o200k();
  const ids: number[] = [];
  for (let pos = 0; pos < text.length && ids.length <= limit; ) {
    let end = text.length;
    if (end - pos > ENCODE_CHUNK) {
      end = pos + ENCODE_CHUNK;
      let space = text.lastIndexOf(' ', end);
      while (space > pos + ENCODE_CHUNK / 2 && /\s/.test(text.charAt(space - 1)))
        space = text.lastIndexOf(' ', space - 1);
      if (space > pos + ENCODE_CHUNK / 2) end = space;
      else if (/[\uD800-\uDBFF]/.test(text.charAt(end - 1))) end--;
    }
    for (const id of enc.encode_ordinary(text.slice(pos, end))) ids.push(id);
    pos = end;
  }
  return ids;
}

export class LocalProvider implements InferenceProvider {
  readonly kind = 'local';
  readonly name: string;
  private readonly dimensions: number;
  private readonly chunkDelayMs: number;
  private readonly contextLength: number;
  private readonly maxOutputTokens: number;

  constructor(config: LocalProviderConfig) {
    this.name = config.name;
    this.dimensions = config.embeddingDimensions ?? LOCAL_EMBEDDING_DIMENSIONS;
    this.chunkDelayMs = config.chunkDelayMs ?? 0;
    this.contextLength = config.contextLength ?? LOCAL_CONTEXT_LENGTH;
    this.maxOutputTokens = config.maxOutputTokens ?? LOCAL_MAX_OUTPUT_TOKENS;
    if (!Number.isInteger(this.dimensions) || this.dimensions < 1) {
      throw new Error(`provider ${config.name}: embedding_dimensions must be a positive integer`);
    }
    if (!Number.isFinite(this.chunkDelayMs) || this.chunkDelayMs < 0) {
      throw new Error(`provider ${config.name}: chunk_delay_ms must be a non-negative number`);
    }
    for (const [key, value] of [
      ['context_length', this.contextLength],
      ['max_output_tokens', this.maxOutputTokens],
    ] as const) {
      if (!Number.isInteger(value) || value < 1) {
        throw new Error(`provider ${config.name}: ${key} must be a positive integer`);
      }
    }
    // Build the encoder now rather than inside the first request.
    o200k();
  }

  async chat(body: JsonObject, ctx: CallContext): Promise<ProviderResult> {
    this.throwIfAborted(ctx.signal);
    const model = String(body.model);
    const n = positiveInt(body.n) ?? 1;
    const promptTokens = countPromptTokens(body);
    if (promptTokens > this.contextLength) {
      throw this.contextError('messages', `your messages resulted in ${promptTokens} tokens`);
    }
    // Each choice's share of the output cap, as if the model had run out of room for the rest.
    const limit = Math.min(maxTokens(body), Math.max(1, Math.floor(this.maxOutputTokens / n)));
    const answer = play(localReply(body), limit, stopSequences(body.stop));
    const usage = usageOf(promptTokens, answer.tokens * n);
    const id = `chatcmpl-${randomUUID().replaceAll('-', '')}`;
    const created = Math.floor(Date.now() / 1000);

    if (body.stream !== true) {
      const message =
        answer.kind === 'text'
          ? { role: 'assistant', content: answer.content, refusal: null, annotations: [] }
          : {
              role: 'assistant',
              content: null,
              tool_calls: answer.calls.map((c) => ({
                id: c.id,
                type: 'function',
                function: { name: c.name, arguments: c.arguments },
              })),
              refusal: null,
              annotations: [],
            };
      const choices = Array.from({ length: n }, (_, index) => ({
        index,
        message,
        logprobs: null,
        finish_reason: answer.finishReason,
      }));
      return {
        kind: 'json',
        body: {
          id,
          object: 'chat.completion',
          created,
          model,
          choices,
          usage,
          system_fingerprint: SYSTEM_FINGERPRINT,
        },
      };
    }

    const options = body.stream_options;
    const includeUsage =
      options !== null && typeof options === 'object' && (options as JsonObject).include_usage === true;
    const header = {
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      system_fingerprint: SYSTEM_FINGERPRINT,
    };
    const chunk = (choices: JsonObject[], last?: JsonObject): SseEvent => ({
      data: JSON.stringify({ ...header, choices, ...(includeUsage ? { usage: last ?? null } : {}) }),
    });
    const choice = (index: number, delta: JsonObject, finishReason: string | null): JsonObject => ({
      index,
      delta,
      logprobs: null,
      finish_reason: finishReason,
    });

    // One list of deltas, sent for every choice in turn, as the text deltas always were.
    const deltas: JsonObject[] = [];
    if (answer.kind === 'text') {
      deltas.push({ role: 'assistant', content: '', refusal: null });
      for (const text of answer.deltas) deltas.push({ content: text });
    } else {
      // OpenAI's form: the first delta of a call has its index, id, type and name with empty
      // arguments (the first call's also the role); then the arguments in pieces under the same index.
      answer.calls.forEach((call, index) => {
        const head = {
          index,
          id: call.id,
          type: 'function',
          function: { name: call.name, arguments: '' },
        };
        deltas.push(
          index === 0
            ? { role: 'assistant', content: null, tool_calls: [head], refusal: null }
            : { tool_calls: [head] },
        );
        for (const piece of call.pieces) {
          deltas.push({ tool_calls: [{ index, function: { arguments: piece } }] });
        }
      });
    }
    const events: SseEvent[] = [];
    for (const delta of deltas) {
      for (let i = 0; i < n; i++) events.push(chunk([choice(i, delta, null)]));
    }
    for (let i = 0; i < n; i++) events.push(chunk([choice(i, {}, answer.finishReason)]));
    if (includeUsage) events.push(chunk([], usage));
    return { kind: 'stream', events: this.paced(events, ctx.signal) };
  }

  async embeddings(body: JsonObject, ctx: CallContext): Promise<ProviderResult> {
    this.throwIfAborted(ctx.signal);
    const texts = embeddingInputs(body.input);
    let inputTokens = 0;
    for (const input of texts) inputTokens += input.tokens;
    if (inputTokens > this.contextLength) {
      throw this.contextError('input', `you requested ${inputTokens} tokens in the input`);
    }
    const size = this.outputDimensions(body);
    const format = body.encoding_format ?? 'float';
    if (format !== 'float' && format !== 'base64') {
      throw invalidParameter('encoding_format', 'encoding_format must be float or base64');
    }
    let promptTokens = 0;
    const data = texts.map((input, index) => {
      promptTokens += input.tokens;
      const vector = embed(input.text, size);
      return { object: 'embedding', index, embedding: format === 'base64' ? toBase64(vector) : vector };
    });
    return {
      kind: 'json',
      body: {
        object: 'list',
        data,
        model: String(body.model),
        usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
      },
    };
  }

  async close(): Promise<void> {
    // The shared encoder lives as long as the process: other LocalProviders (and reloads) reuse it.
  }

  private outputDimensions(body: JsonObject): number {
    const requested = body.dimensions;
    if (requested === undefined || requested === null) return this.dimensions;
    if (typeof requested !== 'number' || !Number.isInteger(requested) || requested < 1) {
      throw invalidParameter('dimensions', 'dimensions must be a positive integer');
    }
    if (requested > this.dimensions) {
      throw invalidParameter(
        'dimensions',
        `dimensions must be at most ${this.dimensions} for ${String(body.model)}`,
      );
    }
    return requested;
  }

  /** Yields to the event loop before every chunk, so aborts and back-pressure act between chunks. */
  private async *paced(events: SseEvent[], signal: AbortSignal): AsyncGenerator<SseEvent> {
    for (const event of events) {
      try {
        if (this.chunkDelayMs > 0) await sleep(this.chunkDelayMs, undefined, { signal });
        else await nextTurn(undefined, { signal });
      } catch (err) {
        if (signal.aborted) throw this.abortError(signal);
        throw err;
      }
      this.throwIfAborted(signal);
      yield event;
    }
  }

  /** What an OpenAI server answers for a prompt over the model's context (code context_length_exceeded). */
  private contextError(param: string, what: string): UpstreamError {
    const message =
      `This model's maximum context length is ${this.contextLength} tokens. However, ${what}. ` +
      `Please reduce the length of the ${param}.`;
    return new UpstreamError('status', this.name, `${this.name} answered HTTP 400`, {
      status: 400,
      upstreamMessage: message,
      param,
    });
  }

  private throwIfAborted(signal: AbortSignal): void {
    if (signal.aborted) throw this.abortError(signal);
  }

  /** The same failure kinds the HTTP adapters report, so dispatch treats a local call like any other. */
  private abortError(signal: AbortSignal): UpstreamError {
    const reason: unknown = signal.reason;
    if (reason instanceof Error && reason.name === 'TimeoutError') {
      return new UpstreamError('timeout', this.name, `${this.name} exceeded the total timeout`, {
        cause: reason,
      });
    }
    return new UpstreamError('aborted', this.name, 'the client went away', { cause: reason });
  }
}

interface Completion {
  content: string;
  /** `content` cut into streamed deltas; they concatenate to `content`. */
  deltas: string[];
  /** Completion tokens generated, counting a matched stop sequence as a model would. */
  tokens: number;
  finishReason: 'stop' | 'length';
}

/**
 * Plays the reply back token by token as a model would: the first stop sequence to be completed ends
 * generation (and is not returned), else the token limit does.
 */
function generate(reply: string, limit: number, stops: string[]): Completion {
  const enc = o200k();
  const ids = encodeUpTo(reply, limit);
  // One streaming decoder: a token ending inside a multi-byte character yields '' and the next token
  // carries the whole character, so pieces always concatenate to valid text.
  const decoder = new TextDecoder();
  const pieces: string[] = [];
  const ends: number[] = [];
  let length = 0;
  for (const id of ids) {
    const piece = decoder.decode(enc.decode_single_token_bytes(id), { stream: true });
    pieces.push(piece);
    length += piece.length;
    ends.push(length);
  }

  let stopAt = -1;
  let stopTokens = Number.POSITIVE_INFINITY;
  for (const stop of stops) {
    const at = reply.indexOf(stop);
    if (at === -1) continue;
    // The stop sequence is complete once the token holding its last character is generated; one past
    // the tokens encoded is past the limit too.
    const tokens = ends.findIndex((end) => end >= at + stop.length) + 1;
    if (tokens === 0) continue;
    if (tokens < stopTokens || (tokens === stopTokens && at < stopAt)) {
      stopAt = at;
      stopTokens = tokens;
    }
  }

  let content: string;
  let tokens: number;
  let finishReason: Completion['finishReason'];
  if (stopAt !== -1 && stopTokens <= limit) {
    content = reply.slice(0, stopAt);
    tokens = stopTokens;
    finishReason = 'stop';
  } else if (ids.length > limit) {
    tokens = limit;
    content = pieces.slice(0, limit).join('');
    finishReason = 'length';
  } else {
    content = reply;
    tokens = ids.length;
    finishReason = 'stop';
  }

  const deltas: string[] = [];
  let emitted = 0;
  for (let i = 0; i < pieces.length && emitted < content.length; i += TOKENS_PER_CHUNK) {
    const text = pieces
      .slice(i, i + TOKENS_PER_CHUNK)
      .join('')
      .slice(0, content.length - emitted);
    if (text.length === 0) continue;
    deltas.push(text);
    emitted += text.length;
  }
  return { content, deltas, tokens, finishReason };
}

interface PlayedCall extends LocalToolCall {
  id: string;
  /** `arguments` cut into streamed pieces. */
  pieces: string[];
}

type Played =
  | { kind: 'text'; content: string; deltas: string[]; tokens: number; finishReason: 'stop' | 'length' }
  | { kind: 'tool_calls'; calls: PlayedCall[]; tokens: number; finishReason: 'tool_calls' | 'length' };

/**
 * Generates the reply within `limit` tokens. Tool calls: each call's name and arguments count; the
 * arguments of the call that reaches the limit are cut there (finish_reason `length`) and later calls
 * are not made. Stop sequences apply to text only, as with OpenAI.
 */
function play(reply: LocalReply, limit: number, stops: string[]): Played {
  if (reply.kind === 'text') return { kind: 'text', ...generate(reply.text, limit, stops) };
  const calls: PlayedCall[] = [];
  let tokens = 0;
  let cut = false;
  for (const call of reply.calls) {
    if (tokens >= limit) {
      cut = true;
      break;
    }
    tokens += countTextTokens(call.name, 'o200k_base');
    const args = generate(call.arguments, Math.max(1, limit - tokens), []);
    tokens += args.tokens;
    cut ||= args.finishReason === 'length';
    const id = `call_${randomUUID().replaceAll('-', '').slice(0, 24)}`;
    calls.push({ id, name: call.name, arguments: args.content, pieces: args.deltas });
    if (cut) break;
  }
  return { kind: 'tool_calls', calls, tokens, finishReason: cut ? 'length' : 'tool_calls' };
}

function maxTokens(body: JsonObject): number {
  return positiveInt(body.max_completion_tokens) ?? positiveInt(body.max_tokens) ?? Number.POSITIVE_INFINITY;
}

function stopSequences(stop: unknown): string[] {
  const list = typeof stop === 'string' ? [stop] : Array.isArray(stop) ? stop : [];
  return list.filter((s): s is string => typeof s === 'string' && s.length > 0);
}

function positiveInt(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value > 0 ? value : undefined;
}

/**
 * Counts as metering does (tokens.ts): as encode_ordinary (text like `<|endoftext|>` in user input is
 * just text), with bounded work over the whole request.
 */
function tokenCounter(): (text: string) => number {
  const budget = new TokenBudget();
  return (text) => countTextTokens(text, 'o200k_base', budget);
}

/**
 * OpenAI's published counting rule for its chat models: 3 tokens of framing per message, 1 more for a
 * `name`, 3 to prime the reply. Tool calls and tool definitions count as their JSON text, images
 * IMAGE_PART_TOKENS each.
 */
function countPromptTokens(body: JsonObject): number {
  const countTokens = tokenCounter();
  let total = 3;
  const messages = Array.isArray(body.messages) ? body.messages : [];
  for (const m of messages) {
    if (m === null || typeof m !== 'object') continue;
    const message = m as JsonObject;
    total += 3 + countTokens(String(message.role ?? '')) + countTokens(messageText(message.content));
    if (typeof message.name === 'string') total += 1 + countTokens(message.name);
    if (message.tool_calls !== undefined) total += countTokens(JSON.stringify(message.tool_calls));
  }
  total += countImages(messages) * IMAGE_PART_TOKENS;
  if (Array.isArray(body.tools) && body.tools.length > 0) total += countTokens(JSON.stringify(body.tools));
  return total;
}

function usageOf(promptTokens: number, completionTokens: number): JsonObject {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

interface EmbeddingInput {
  text: string;
  tokens: number;
}

function invalidInput(message: string): ProviderRequestError {
  return invalidParameter('input', message);
}

/** OpenAI's four input shapes: a string, strings, one token array, token arrays. */
function embeddingInputs(input: unknown): EmbeddingInput[] {
  const countTokens = tokenCounter();
  const textInput = (text: string): EmbeddingInput => {
    if (text.length === 0) throw invalidInput('input must not contain empty strings');
    return { text, tokens: countTokens(text) };
  };
  if (typeof input === 'string') return [textInput(input)];
  if (!Array.isArray(input) || input.length === 0) {
    throw invalidInput('input must be a non-empty string, an array of non-empty strings, or token arrays');
  }
  if (input.length > LOCAL_EMBEDDING_MAX_INPUTS && !input.every((item) => typeof item === 'number')) {
    throw invalidInput(`input must have at most ${LOCAL_EMBEDDING_MAX_INPUTS} items`);
  }
  if (input.every((item) => typeof item === 'string')) return input.map(textInput);
  if (input.every((item) => typeof item === 'number')) return [tokenInput(input)];
  if (input.every((item) => Array.isArray(item))) return input.map(tokenInput);
  throw invalidInput('input must be strings or token arrays, not a mix');
}

function tokenInput(ids: unknown[]): EmbeddingInput {
  if (ids.length === 0) throw invalidInput('input must not contain empty token arrays');
  for (const id of ids) {
    // Checked before decoding: the WASM decoder traps on unknown ids instead of throwing.
    const valid =
      typeof id === 'number' &&
      Number.isInteger(id) &&
      ((id >= 0 && id < O200K_ORDINARY_TOKENS) || O200K_SPECIAL_TOKENS.has(id));
    if (!valid) throw invalidInput(`input contains ${String(id)}, which is not an o200k_base token id`);
  }
  const bytes = o200k().decode(Uint32Array.from(ids as number[]));
  return { text: new TextDecoder().decode(bytes), tokens: ids.length };
}

/**
 * Words (letters and digits), each with its character trigrams so inflections stay close (`jumps`,
 * `jumped`), plus word bigrams for a little order. Function words are damped, else two texts sharing
 * only `the` would look related. A text with no words falls back to its symbols, then to one feature.
 */
function features(text: string): Map<string, number> {
  const normalised = text.normalize('NFKC').toLowerCase();
  let words = normalised.match(/[\p{L}\p{N}]+/gu) ?? [];
  if (words.length === 0) words = normalised.match(/\S/gu) ?? ['\u0000'];
  // Summed per distinct feature, so each costs one vector however often it occurs.
  const out = new Map<string, number>();
  const add = (feature: string, weight: number) => out.set(feature, (out.get(feature) ?? 0) + weight);
  const counts = new Map<string, number>();
  for (const [i, word] of words.entries()) {
    counts.set(word, (counts.get(word) ?? 0) + 1);
    const previous = words[i - 1];
    if (previous === undefined) continue;
    const bothStop = STOP_WORDS.has(previous) && STOP_WORDS.has(word);
    add(`b:${previous} ${word}`, bothStop ? STOP_WORD_WEIGHT * BIGRAM_WEIGHT : BIGRAM_WEIGHT);
  }
  for (const [word, count] of counts) {
    // Sublinear in the count, so one repeated word cannot drown the rest of a long text.
    const weight = (1 + Math.log(count)) * (STOP_WORDS.has(word) ? STOP_WORD_WEIGHT : 1);
    add(`w:${word}`, weight);
    const padded = `<${word}>`;
    const trigrams = padded.length - 2;
    if (trigrams < 2) continue;
    // Scaled so a word's trigrams together weigh what the word does, whatever its length.
    const share = (weight * TRIGRAM_WEIGHT) / Math.sqrt(trigrams);
    for (let j = 0; j < trigrams; j++) add(`t:${padded.slice(j, j + 3)}`, share);
  }
  return out;
}

/**
 * Each feature seeds a PRNG whose first `size` outputs are its vector, so the first d components of
 * a vector never depend on the native size: truncation is exactly computing fewer components.
 */
function embed(text: string, size: number): number[] {
  const acc = new Float64Array(size);
  for (const [feature, weight] of features(text)) {
    let state = fnv1a(feature);
    for (let i = 0; i < size; i++) {
      state = (state + 0x6d2b79f5) | 0;
      acc[i] = (acc[i] ?? 0) + weight * unitFloat(state);
    }
  }
  let norm = 0;
  for (const v of acc) norm += v * v;
  norm = Math.sqrt(norm);
  // Only reachable if features cancel exactly: any fixed unit vector keeps the contract.
  if (norm === 0) return Array.from({ length: size }, (_, i) => (i === 0 ? 1 : 0));
  // float32, as real embedding models return: the float and base64 encodings then carry the same values.
  return Array.from(acc, (v) => Math.fround(v / norm));
}

/** mulberry32's output mix of its counter state, mapped to [-1, 1). */
function unitFloat(state: number): number {
  let t = Math.imul(state ^ (state >>> 15), state | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 2_147_483_648 - 1;
}

function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

function toBase64(vector: number[]): string {
  const buf = Buffer.alloc(vector.length * 4);
  vector.forEach((v, i) => {
    buf.writeFloatLE(v, i * 4);
  });
  return buf.toString('base64');
}
