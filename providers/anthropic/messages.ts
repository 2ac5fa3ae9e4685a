/**
 * OpenAI chat messages → Anthropic's `system` and alternating user/assistant turns of content blocks:
 * text, images, tool_use and tool_result, thinking. Part of the request direction (request.ts); tested
 * in test/providers/anthropic-request.test.ts and anthropic-basics.test.ts.
 */
import { invalidParameter, type ProviderRequestError } from '../request-error.js';
import type { JsonObject } from '../types.js';
import { isObject } from './util.js';

export interface AnthropicTextBlock {
  type: 'text';
  text: string;
}

export type AnthropicImageSource =
  | { type: 'base64'; media_type: string; data: string }
  | { type: 'url'; url: string };

export type AnthropicBlock =
  | AnthropicTextBlock
  | { type: 'image'; source: AnthropicImageSource }
  | { type: 'tool_use'; id: string; name: string; input: unknown }
  | { type: 'tool_result'; tool_use_id: string; content?: string | AnthropicTextBlock[] }
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'redacted_thinking'; data: string };

export interface AnthropicMessageParam {
  role: 'user' | 'assistant';
  content: string | AnthropicBlock[];
}

/** Anthropic takes these image types only (vision docs). */
const IMAGE_MEDIA_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);

/**
 * System and developer messages become the top-level `system`; the rest must alternate user/assistant,
 * so consecutive messages of one role are merged into one message. `tool` messages are user turns of
 * tool_result blocks, which Anthropic wants first in their user turn.
 */
export function mapMessages(raw: unknown): { system: string | undefined; messages: AnthropicMessageParam[] } {
  const systemParts: string[] = [];
  const turns: { role: 'user' | 'assistant'; blocks: AnthropicBlock[] }[] = [];
  const list = Array.isArray(raw) ? raw : [];
  list.forEach((m: unknown, i) => {
    const where = `messages[${i}]`;
    if (!isObject(m)) throw invalidParameter(where, `${where} must be an object`);
    const role = m.role;
    if (role === 'system' || role === 'developer') {
      systemParts.push(textParts(m.content, where).join('\n'));
      return;
    }
    const { turnRole, blocks } = turnOf(m, role, where);
    const last = turns.at(-1);
    if (last?.role === turnRole) last.blocks.push(...blocks);
    else turns.push({ role: turnRole, blocks });
  });
  return {
    system: systemParts.length > 0 ? systemParts.join('\n\n') : undefined,
    messages: turns.map(({ role, blocks }) => ({ role, content: contentOf(role, blocks) })),
  };
}

/** One non-system message as the blocks of a user or assistant turn (`tool` messages are user turns). */
function turnOf(
  m: JsonObject,
  role: unknown,
  where: string,
): { turnRole: 'user' | 'assistant'; blocks: AnthropicBlock[] } {
  switch (role) {
    case 'user':
      return { turnRole: 'user', blocks: userBlocks(m.content, where) };
    case 'assistant':
      return { turnRole: 'assistant', blocks: assistantBlocks(m, where) };
    case 'tool':
      return { turnRole: 'user', blocks: [toolResult(m, where)] };
    default:
      throw invalidParameter(
        `${where}.role`,
        `${where}.role: ${String(role)} messages are not supported by this model's provider`,
      );
  }
}

function userBlocks(content: unknown, where: string): AnthropicBlock[] {
  if (content === undefined || content === null) return [];
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  if (!Array.isArray(content)) {
    throw invalidParameter(`${where}.content`, `${where}.content must be a string or an array of parts`);
  }
  return content.map((part: unknown, j): AnthropicBlock => {
    if (isObject(part) && part.type === 'text' && typeof part.text === 'string') {
      return { type: 'text', text: part.text };
    }
    if (isObject(part) && part.type === 'image_url') return imageBlock(part, `${where}.content[${j}]`);
    throw unsupportedPart(part, `${where}.content[${j}]`);
  });
}

/** image_url parts: data: URIs become base64 sources, http(s) URLs url sources; `detail` has no equivalent. */
function imageBlock(part: JsonObject, where: string): AnthropicBlock {
  const url = isObject(part.image_url) ? part.image_url.url : undefined;
  if (typeof url !== 'string')
    throw invalidParameter(`${where}.image_url.url`, `${where}.image_url.url is required`);
  if (url.startsWith('data:')) {
    const match = /^data:([^;,]+)((?:;[^;,]*)*);base64,(.*)$/s.exec(url);
    if (!match) {
      throw invalidParameter(
        `${where}.image_url.url`,
        `${where}.image_url.url: data URIs must be base64-encoded`,
      );
    }
    const mediaType = (match[1] as string).toLowerCase();
    if (!IMAGE_MEDIA_TYPES.has(mediaType)) {
      throw invalidParameter(
        `${where}.image_url.url`,
        `${where}.image_url.url: ${mediaType} images are not supported by this model's provider (jpeg, png, gif, webp are)`,
      );
    }
    return { type: 'image', source: { type: 'base64', media_type: mediaType, data: match[3] as string } };
  }
  if (/^https?:\/\//i.test(url)) return { type: 'image', source: { type: 'url', url } };
  throw invalidParameter(
    `${where}.image_url.url`,
    `${where}.image_url.url must be an http(s) URL or a data: URI`,
  );
}

/**
 * An assistant turn: its thinking blocks first (they must precede the text and tool_use they led to,
 * unchanged, signatures and all), then its text, then its tool calls.
 */
function assistantBlocks(m: JsonObject, where: string): AnthropicBlock[] {
  for (const field of ['function_call', 'audio'] as const) {
    if (m[field] !== undefined && m[field] !== null) {
      throw invalidParameter(
        `${where}.${field}`,
        `${where}.${field} is not supported by this model's provider`,
      );
    }
  }
  const blocks: AnthropicBlock[] = thinkingBlocks(m.thinking_blocks, `${where}.thinking_blocks`);
  // refusal parts are what the assistant said; Anthropic has no separate place for them.
  for (const text of textParts(m.content, where, ['text', 'refusal'])) blocks.push({ type: 'text', text });
  // Nor for chat's own `refusal` field, where the Responses bridge sends a refusal back.
  if (typeof m.refusal === 'string') blocks.push({ type: 'text', text: m.refusal });
  const calls = m.tool_calls;
  if (calls !== undefined && calls !== null) {
    if (!Array.isArray(calls))
      throw invalidParameter(`${where}.tool_calls`, `${where}.tool_calls must be an array`);
    for (const [j, call] of calls.entries()) blocks.push(toolUse(call, `${where}.tool_calls[${j}]`));
  }
  return blocks;
}

function thinkingBlocks(value: unknown, where: string): AnthropicBlock[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw invalidParameter(where, `${where} must be an array`);
  return value.map((b: unknown, j): AnthropicBlock => {
    if (
      isObject(b) &&
      b.type === 'thinking' &&
      typeof b.thinking === 'string' &&
      typeof b.signature === 'string'
    ) {
      return { type: 'thinking', thinking: b.thinking, signature: b.signature };
    }
    if (isObject(b) && b.type === 'redacted_thinking' && typeof b.data === 'string') {
      return { type: 'redacted_thinking', data: b.data };
    }
    throw invalidParameter(
      `${where}[${j}]`,
      `${where}[${j}] must be {type: thinking, thinking, signature} or {type: redacted_thinking, data}`,
    );
  });
}

function toolUse(call: unknown, where: string): AnthropicBlock {
  if (
    !isObject(call) ||
    call.type !== 'function' ||
    !isObject(call.function) ||
    typeof call.id !== 'string'
  ) {
    throw invalidParameter(where, `${where} must be a function tool call with an id`);
  }
  const { name, arguments: args } = call.function;
  if (typeof name !== 'string')
    throw invalidParameter(`${where}.function.name`, `${where}.function.name is required`);
  let input: unknown = {};
  if (typeof args === 'string' && args.trim() !== '') {
    try {
      input = JSON.parse(args);
    } catch {
      throw invalidParameter(`${where}.function.arguments`, `${where}.function.arguments is not valid JSON`);
    }
  }
  if (!isObject(input)) {
    throw invalidParameter(
      `${where}.function.arguments`,
      `${where}.function.arguments must be a JSON object`,
    );
  }
  return { type: 'tool_use', id: call.id, name, input };
}

function toolResult(m: JsonObject, where: string): AnthropicBlock {
  if (typeof m.tool_call_id !== 'string' || m.tool_call_id === '') {
    throw invalidParameter(`${where}.tool_call_id`, `${where}.tool_call_id is required`);
  }
  const texts = textParts(m.content, where).filter((t) => t !== '');
  const block: AnthropicBlock = { type: 'tool_result', tool_use_id: m.tool_call_id };
  if (texts.length === 1) block.content = texts[0] as string;
  else if (texts.length > 1) block.content = texts.map((text) => ({ type: 'text', text }));
  return block;
}

/** The texts of a message's content: a string, or an array of parts of the given types (others: 400). */
function textParts(content: unknown, where: string, types: readonly string[] = ['text']): string[] {
  if (content === undefined || content === null) return [];
  if (typeof content === 'string') return [content];
  if (!Array.isArray(content)) {
    throw invalidParameter(`${where}.content`, `${where}.content must be a string or an array of parts`);
  }
  return content.map((part: unknown, j) => {
    if (isObject(part) && types.includes(String(part.type))) {
      const text = part.type === 'refusal' ? part.refusal : part.text;
      if (typeof text === 'string') return text;
    }
    throw unsupportedPart(part, `${where}.content[${j}]`);
  });
}

function unsupportedPart(part: unknown, where: string): ProviderRequestError {
  const type = isObject(part) ? String(part.type) : typeof part;
  return invalidParameter(
    where,
    `${where}: ${type} content parts are not supported here by this model's provider`,
  );
}

/**
 * Anthropic rejects empty text blocks, so they are dropped; tool results go first in a user turn. A
 * message of one text block is sent as a string; one left with nothing is sent as '' so that Anthropic
 * itself reports it, rather than the adapter silently changing the conversation.
 */
function contentOf(role: 'user' | 'assistant', blocks: AnthropicBlock[]): string | AnthropicBlock[] {
  let kept = blocks.filter((b) => b.type !== 'text' || b.text !== '');
  if (role === 'user') {
    kept = [...kept.filter((b) => b.type === 'tool_result'), ...kept.filter((b) => b.type !== 'tool_result')];
  }
  if (kept.length === 0) return '';
  const only = kept[0] as AnthropicBlock;
  if (kept.length === 1 && only.type === 'text') return only.text;
  return kept;
}
