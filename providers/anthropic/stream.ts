/**
 * Anthropic stream events → OpenAI `chat.completion.chunk` events. Pure; tested in
 * test/providers/anthropic-stream.test.ts. Wire format: docs.anthropic.com, "Streaming Messages".
 */
import type { JsonObject, SseEvent } from '../types.js';
import {
  type AnthropicUsage,
  finishReasonOf,
  NO_USAGE,
  type OpenAIFinishReason,
  openAIUsage,
  protocolError,
  readUsage,
  streamedError,
  type TranslateOptions,
} from './response.js';
import { isObject, nowSeconds } from './util.js';

export interface StreamTranslatorOptions extends TranslateOptions {
  /** The request's `stream_options.include_usage`: a final chunk with `choices: []` and the usage. */
  includeUsage: boolean;
}

type StreamState = 'awaiting_start' | 'streaming' | 'done';

/** What an open content block (by Anthropic's index) turns into. */
type Block =
  | { kind: 'text' }
  | { kind: 'thinking'; thinking: string; signature: string }
  /**
   * A tool call, `index` counting tool calls only (OpenAI's tool_calls[].index); `empty` until a
   * non-empty input piece arrives.
   */
  | { kind: 'tool'; index: number; empty: boolean }
  /** The structured-output tool: its input is the answer's content. */
  | { kind: 'json'; empty: boolean }
  | { kind: 'other' };

/**
 * Translates Anthropic stream events into `chat.completion.chunk` events, one event at a time:
 *
 *   awaiting_start --message_start--> streaming --message_stop--> done
 *
 * message_start gives the role chunk; text_delta a content chunk; thinking_delta a reasoning_content
 * chunk; a tool_use block's start the tool call's id and name, and each input_json_delta a piece of its
 * arguments. Complete thinking and redacted_thinking blocks (signatures included, to be sent back next
 * turn) go out together in one chunk's `thinking_blocks`, when the first block after them starts (or at
 * the end). Each block is sent once: a client rebuilds the list by concatenating the deltas' lists, as it
 * does with reasoning_content pieces (the convention of DeepSeek and vLLM). A turn with one run of
 * thinking (the usual case: thinking comes first) has a single such delta, which is the whole list, so a
 * client that keeps the last value of an unknown field (the OpenAI SDK's stream helper) has it too; with
 * thinking interleaved between tool calls, that client keeps only the last run (README.md, "Anthropic
 * models"). Repeating earlier blocks instead would duplicate them for every concatenating client,
 * Gantry's own Responses bridge among them. message_delta only records the stop reason and output
 * tokens, and message_stop emits the finish chunk (and the usage chunk), so a stream cut between the two
 * never shows the client a finish_reason followed by an error.
 */
export class AnthropicStreamTranslator {
  private state: StreamState = 'awaiting_start';
  private id = '';
  private readonly created: number;
  private stopReason: unknown = null;
  private usage: AnthropicUsage = NO_USAGE;
  private readonly blocks = new Map<number, Block>();
  private toolCalls = 0;
  private sawJson = false;
  /** Thinking blocks complete but not sent yet: the current run only (see the class comment). */
  private pendingThinking: JsonObject[] = [];

  constructor(private readonly options: StreamTranslatorOptions) {
    this.created = options.created ?? nowSeconds();
  }

  /** True once message_stop was seen: the stream is complete. */
  get done(): boolean {
    return this.state === 'done';
  }

  /** The chunks one Anthropic event becomes (often none). Throws UpstreamError on `error` events. */
  push(event: SseEvent): SseEvent[] {
    const data = this.parse(event);
    const type = typeof data.type === 'string' ? data.type : event.event;
    if (type === 'error') throw streamedError(this.options.provider, data);
    if (type === 'ping' || this.state === 'done') return [];
    if (this.state === 'awaiting_start') {
      if (type !== 'message_start') return this.outOfOrder(type);
      return this.start(data);
    }
    switch (type) {
      case 'content_block_start':
        return this.blockStart(data);
      case 'content_block_delta':
        return this.blockDelta(data);
      case 'content_block_stop':
        return this.blockStop(data);
      case 'message_delta':
        this.messageDelta(data);
        return [];
      case 'message_stop':
        return this.stop();
      case 'message_start':
        return this.outOfOrder(type);
      default:
        // Event types Anthropic adds later: the docs ask clients to skip them.
        return [];
    }
  }

  /** The upstream's stream ended: a stream without message_stop is incomplete, never a success. */
  end(): void {
    if (this.state !== 'done') {
      const p = this.options.provider;
      throw protocolError(p, `${p} ended the stream before message_stop`);
    }
  }

  private parse(event: SseEvent): JsonObject {
    let data: unknown;
    try {
      data = JSON.parse(event.data);
    } catch (cause) {
      const p = this.options.provider;
      throw protocolError(p, `${p} sent a stream event that is not JSON`, cause);
    }
    if (!isObject(data)) {
      const p = this.options.provider;
      throw protocolError(p, `${p} sent a stream event that is not a JSON object`);
    }
    return data;
  }

  private outOfOrder(type: string | undefined): never {
    const p = this.options.provider;
    throw protocolError(p, `${p} sent ${String(type)} in the wrong place of the stream`);
  }

  private start(data: JsonObject): SseEvent[] {
    const message = isObject(data.message) ? data.message : {};
    if (typeof message.id !== 'string') {
      const p = this.options.provider;
      throw protocolError(p, `${p} sent message_start without a message id`);
    }
    this.id = `chatcmpl-${message.id}`;
    this.usage = readUsage(message.usage, NO_USAGE);
    this.state = 'streaming';
    return [this.delta({ role: 'assistant', content: '' })];
  }

  private blockStart(data: JsonObject): SseEvent[] {
    const block = isObject(data.content_block) ? data.content_block : {};
    const index = typeof data.index === 'number' ? data.index : -1;
    if (block.type === 'thinking' || block.type === 'redacted_thinking')
      return this.thinkingStart(index, block);
    const out = this.startOf(index, block);
    return this.pendingThinking.length === 0 ? out : [this.flushThinking(), ...out];
  }

  private thinkingStart(index: number, block: JsonObject): SseEvent[] {
    if (block.type === 'redacted_thinking') {
      this.blocks.set(index, { kind: 'other' });
      this.pendingThinking.push({ type: 'redacted_thinking', data: block.data ?? '' });
      return [];
    }
    const thinking = typeof block.thinking === 'string' ? block.thinking : '';
    const signature = typeof block.signature === 'string' ? block.signature : '';
    this.blocks.set(index, { kind: 'thinking', thinking, signature });
    return thinking === '' ? [] : [this.delta({ reasoning_content: thinking })];
  }

  private flushThinking(): SseEvent {
    const blocks = this.pendingThinking;
    this.pendingThinking = [];
    return this.delta({ thinking_blocks: blocks });
  }

  private startOf(index: number, block: JsonObject): SseEvent[] {
    switch (block.type) {
      case 'text':
        this.blocks.set(index, { kind: 'text' });
        return this.text(block.text);
      case 'tool_use': {
        if (this.options.jsonTool !== undefined && block.name === this.options.jsonTool) {
          // Only the first answer-tool call is the answer (see response.ts): a second one is dropped.
          this.blocks.set(index, this.sawJson ? { kind: 'other' } : { kind: 'json', empty: true });
          this.sawJson = true;
          return [];
        }
        const call = this.toolCalls++;
        this.blocks.set(index, { kind: 'tool', index: call, empty: true });
        const first = {
          index: call,
          id: String(block.id),
          type: 'function',
          function: { name: String(block.name), arguments: '' },
        };
        return [this.delta({ tool_calls: [first] })];
      }
      default:
        this.blocks.set(index, { kind: 'other' });
        return [];
    }
  }

  private blockDelta(data: JsonObject): SseEvent[] {
    const delta = isObject(data.delta) ? data.delta : {};
    const block = this.blocks.get(typeof data.index === 'number' ? data.index : -1);
    switch (delta.type) {
      case 'text_delta':
        return this.text(delta.text);
      case 'thinking_delta':
        if (block?.kind !== 'thinking' || typeof delta.thinking !== 'string' || delta.thinking === '')
          return [];
        block.thinking += delta.thinking;
        return [this.delta({ reasoning_content: delta.thinking })];
      case 'signature_delta':
        if (block?.kind === 'thinking' && typeof delta.signature === 'string')
          block.signature += delta.signature;
        return [];
      case 'input_json_delta': {
        const piece = delta.partial_json;
        if (typeof piece !== 'string' || piece === '') return [];
        if (block?.kind === 'json' || block?.kind === 'tool') block.empty = false;
        return block === undefined ? [] : this.inputPiece(block, piece);
      }
      default:
        return [];
    }
  }

  /** A piece of a tool's input JSON: the call's arguments, or the answer's content for the answer tool. */
  private inputPiece(block: Block, piece: string): SseEvent[] {
    if (block.kind === 'json') return this.content(piece);
    if (block.kind !== 'tool') return [];
    return [this.delta({ tool_calls: [{ index: block.index, function: { arguments: piece } }] })];
  }

  /**
   * A thinking block is complete at its stop, signature included. A tool block whose input came in no
   * piece (Anthropic streams an empty input as a lone `partial_json: ""`, or not at all) gets `{}` here,
   * as the JSON answer's `input: {}` does: clients that concatenate the pieces would otherwise hold
   * arguments (or a json_object answer) of "", which is not JSON.
   */
  private blockStop(data: JsonObject): SseEvent[] {
    const index = typeof data.index === 'number' ? data.index : -1;
    const block = this.blocks.get(index);
    this.blocks.delete(index);
    if (block?.kind === 'thinking') {
      this.pendingThinking.push({ type: 'thinking', thinking: block.thinking, signature: block.signature });
    }
    if ((block?.kind === 'tool' || block?.kind === 'json') && block.empty)
      return this.inputPiece(block, '{}');
    return [];
  }

  /** Text is the content, except for structured output, where it is a refusal (see response.ts). */
  private text(text: unknown): SseEvent[] {
    if (this.options.jsonTool === undefined) return this.content(text);
    if (typeof text !== 'string' || text === '') return [];
    return [this.delta({ refusal: text })];
  }

  private content(text: unknown): SseEvent[] {
    if (typeof text !== 'string' || text === '') return [];
    return [this.delta({ content: text })];
  }

  private messageDelta(data: JsonObject): void {
    const delta = isObject(data.delta) ? data.delta : {};
    if (delta.stop_reason !== undefined && delta.stop_reason !== null) this.stopReason = delta.stop_reason;
    // output_tokens here is the running total; newer API versions repeat the input counts too.
    this.usage = readUsage(data.usage, this.usage);
  }

  private stop(): SseEvent[] {
    this.state = 'done';
    const out = this.pendingThinking.length === 0 ? [] : [this.flushThinking()];
    const structured = this.sawJson && this.toolCalls === 0;
    out.push(this.chunk([choice({}, finishReasonOf(this.stopReason, structured))]));
    if (this.options.includeUsage) out.push(this.chunk([], openAIUsage(this.usage)));
    return out;
  }

  private delta(delta: JsonObject): SseEvent {
    return this.chunk([choice(delta, null)]);
  }

  private chunk(choices: JsonObject[], usage: JsonObject | null = null): SseEvent {
    const body: JsonObject = {
      id: this.id,
      object: 'chat.completion.chunk',
      created: this.created,
      model: this.options.model,
      choices,
    };
    // OpenAI sends `usage: null` on every chunk but the last when include_usage is on.
    if (this.options.includeUsage) body.usage = usage;
    return { data: JSON.stringify(body) };
  }
}

function choice(delta: JsonObject, finishReason: OpenAIFinishReason | null): JsonObject {
  return { index: 0, delta, logprobs: null, finish_reason: finishReason };
}
