/**
 * A Responses `input` as chat messages: message items (text and images), the function_call items a
 * previous answer produced and the function_call_output items that answer them. Throws naming the
 * offending item, as OpenAI does.
 */

import type { JsonObject } from '../../providers/types.js';
import { invalidParameter } from '../errors.js';
import {
  type ChatContentPart,
  type ChatMessage,
  type ChatToolCall,
  decodeThinking,
  isObject,
} from './types.js';

const INPUT_ROLES: ReadonlySet<string> = new Set(['user', 'assistant', 'system', 'developer']);
const IMAGE_DETAILS: ReadonlySet<string> = new Set(['auto', 'low', 'high', 'original']);

/**
 * Finds the output item an `item_reference` names (among the account's stored bridged responses);
 * undefined when there is none. Without one (validation only), references are checked for shape.
 */
export type ItemResolver = (id: string) => JsonObject | undefined;

export function inputMessages(input: unknown, resolve?: ItemResolver): ChatMessage[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input)) {
    throw invalidParameter('input', 'input is required and must be a string or an array of input items');
  }
  if (input.length === 0) throw invalidParameter('input', 'input must not be an empty array');
  const messages: ChatMessage[] = [];
  const pending: Pending = { thinking: [] };
  input.forEach((item: unknown, i) => {
    addItem(messages, pending, referenced(item, `input[${i}]`, resolve), `input[${i}]`);
  });
  return messages;
}

/** True when any message carries an image part (the route checks the model takes images). */
export function hasImages(messages: readonly ChatMessage[]): boolean {
  return messages.some((m) => Array.isArray(m.content) && m.content.some((p) => p.type === 'image_url'));
}

/**
 * The item an `item_reference` stands for (the AI SDK sends its earlier output items so when store is
 * on), or the item itself. Only items of the bridge's own stored responses can be referenced.
 */
function referenced(item: unknown, where: string, resolve: ItemResolver | undefined): unknown {
  if (!isObject(item) || item.type !== 'item_reference') return item;
  const id = item.id;
  if (typeof id !== 'string' || id === '') {
    throw invalidParameter(`${where}.id`, `${where}.id must be a non-empty string`);
  }
  // Validation alone: the reference is resolved when the chat body is built.
  if (!resolve) return { type: 'reasoning' };
  const found = resolve(id);
  if (!found || found.type === 'item_reference' || found.type === 'function_call_output') {
    throw invalidParameter(`${where}.id`, `${where}.id: no output item ${id} in your stored responses`);
  }
  return found;
}

/** Thinking blocks of reasoning items, waiting for the assistant turn that follows them. */
interface Pending {
  thinking: unknown[];
}

function addItem(messages: ChatMessage[], pending: Pending, item: unknown, where: string): void {
  if (!isObject(item)) throw invalidParameter(where, `${where} must be an object`);
  const type = item.type ?? 'message';
  switch (type) {
    case 'message': {
      const message = messageItem(item, where);
      if (message.role === 'assistant') takeThinking(message, pending);
      messages.push(message);
      return;
    }
    case 'function_call':
      addFunctionCall(messages, functionCall(item, where));
      takeThinking(messages[messages.length - 1] as ChatMessage, pending);
      return;
    case 'function_call_output':
      messages.push(functionCallOutput(item, where));
      return;
    case 'reasoning': {
      // A previous answer's reasoning, sent back as the SDKs do with `...response.output`. Chat
      // completions takes no reasoning text in its input (DeepSeek and vLLM ask that it not be sent
      // back); the upstream's signed thinking blocks, if the item carries them, go to the next turn.
      const blocks = decodeThinking(item.encrypted_content);
      if (blocks) pending.thinking.push(...blocks);
      return;
    }
    default:
      throw invalidParameter(
        `${where}.type`,
        `${where}.type ${JSON.stringify(type)} is not supported for this model: only message, function_call, function_call_output, reasoning and item_reference items can be bridged onto chat completions`,
      );
  }
}

/**
 * Consecutive function_call items (a parallel answer) become one assistant message, joined to the
 * assistant text just before them: chat wants every call of a turn on one message, before the tool results.
 */
function addFunctionCall(messages: ChatMessage[], call: ChatToolCall): void {
  const last = messages[messages.length - 1];
  if (last?.role === 'assistant') {
    last.tool_calls = [...(last.tool_calls ?? []), call];
    return;
  }
  messages.push({ role: 'assistant', content: null, tool_calls: [call] });
}

function takeThinking(message: ChatMessage, pending: Pending): void {
  if (pending.thinking.length === 0) return;
  message.thinking_blocks = [...(message.thinking_blocks ?? []), ...pending.thinking];
  pending.thinking = [];
}

function functionCall(item: Record<string, unknown>, where: string): ChatToolCall {
  const callId = requireString(item, 'call_id', where);
  const name = requireString(item, 'name', where);
  const args = requireString(item, 'arguments', where, true);
  return { id: callId, type: 'function', function: { name, arguments: args } };
}

function functionCallOutput(item: Record<string, unknown>, where: string): ChatMessage {
  const callId = requireString(item, 'call_id', where);
  const output = item.output;
  if (typeof output === 'string') return { role: 'tool', tool_call_id: callId, content: output };
  if (!Array.isArray(output)) {
    throw invalidParameter(
      `${where}.output`,
      `${where}.output must be a string or an array of content parts`,
    );
  }
  // Chat tool messages hold text only: the output's text parts, joined.
  const texts = output.map((part: unknown, j) => {
    const at = `${where}.output[${j}]`;
    if (!isObject(part) || part.type !== 'input_text' || typeof part.text !== 'string') {
      throw invalidParameter(
        `${at}.type`,
        `${at} is not supported for this model: a function_call_output bridged onto chat completions holds text only`,
      );
    }
    return part.text;
  });
  return { role: 'tool', tool_call_id: callId, content: texts.join('\n') };
}

function messageItem(item: Record<string, unknown>, where: string): ChatMessage {
  const role = item.role;
  if (typeof role !== 'string' || !INPUT_ROLES.has(role)) {
    throw invalidParameter(`${where}.role`, `${where}.role must be one of ${[...INPUT_ROLES].join(', ')}`);
  }
  const chatRole = role as ChatMessage['role'];
  const content = item.content;
  const at = `${where}.content`;
  if (typeof content === 'string') return { role: chatRole, content };
  if (!Array.isArray(content) || content.length === 0) {
    throw invalidParameter(at, `${at} must be a string or a non-empty array of content parts`);
  }
  const parts = content.map((part: unknown, j) => contentPart(part, chatRole, `${at}[${j}]`));
  // Images come only in the roles that have no refusal parts.
  if (parts.some((p) => p.type === 'image_url'))
    return { role: chatRole, content: parts as ChatContentPart[] };
  const texts = parts.flatMap((p) => (p.type === 'text' ? [p.text] : []));
  // Input parts are separate blocks, kept apart as chat templates do with text parts.
  if (chatRole !== 'assistant') return { role: chatRole, content: texts.join('\n') };
  // Assistant parts are pieces of one answer (the SDK's output_text joins them the same way). A refusal
  // goes to chat's own field for it, where chat completions returns it.
  const message: ChatMessage = { role: chatRole, content: texts.join('') };
  const refusal = parts.flatMap((p) => (p.type === 'refusal' ? [p.refusal] : [])).join('');
  if (refusal !== '') message.refusal = refusal;
  return message;
}

/** Mirrors OpenAI: assistant messages hold output_text/refusal parts, the other roles input_text/input_image. */
function contentPart(
  part: unknown,
  role: ChatMessage['role'],
  where: string,
): ChatContentPart | { type: 'refusal'; refusal: string } {
  if (!isObject(part)) throw invalidParameter(where, `${where} must be a content part object`);
  const allowed = role === 'assistant' ? ['output_text', 'refusal'] : ['input_text', 'input_image'];
  const type = part.type;
  if (typeof type !== 'string' || !allowed.includes(type)) {
    const supported = role === 'assistant' ? 'output_text and refusal' : 'input_text and input_image';
    throw invalidParameter(
      `${where}.type`,
      `${where}.type ${JSON.stringify(type)} is not supported in a ${role} message: use ${supported}`,
    );
  }
  if (type === 'input_image') return imagePart(part, where);
  const field = type === 'refusal' ? 'refusal' : 'text';
  const text = part[field];
  if (typeof text !== 'string')
    throw invalidParameter(`${where}.${field}`, `${where}.${field} must be a string`);
  return type === 'refusal' ? { type: 'refusal', refusal: text } : { type: 'text', text };
}

/** input_image → chat's image_url part. Images by file_id need OpenAI's Files API, which Gantry does not have. */
function imagePart(part: Record<string, unknown>, where: string): ChatContentPart {
  if (typeof part.file_id === 'string') {
    throw invalidParameter(
      `${where}.file_id`,
      `${where}.file_id is not supported: Gantry has no Files API; send the image as image_url (a data: URI or an https URL)`,
    );
  }
  const url = part.image_url;
  if (typeof url !== 'string' || !/^(data:|https?:\/\/)/i.test(url)) {
    throw invalidParameter(`${where}.image_url`, `${where}.image_url must be a data: URI or an http(s) URL`);
  }
  const detail = part.detail;
  if (detail !== undefined && detail !== null && (typeof detail !== 'string' || !IMAGE_DETAILS.has(detail))) {
    throw invalidParameter(
      `${where}.detail`,
      `${where}.detail must be one of ${[...IMAGE_DETAILS].join(', ')}`,
    );
  }
  return { type: 'image_url', image_url: typeof detail === 'string' ? { url, detail } : { url } };
}

function requireString(item: Record<string, unknown>, name: string, where: string, empty = false): string {
  const v = item[name];
  if (typeof v !== 'string' || (!empty && v === '')) {
    throw invalidParameter(
      `${where}.${name}`,
      `${where}.${name} must be a ${empty ? '' : 'non-empty '}string`,
    );
  }
  return v;
}
