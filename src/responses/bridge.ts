/**
 * The Responses API bridged onto chat completions, for upstreams that do not speak it: request
 * validation, the chat body, and the Response objects and events built from chat answers. Pure: the
 * route owns ids, history and I/O.
 */
import type { JsonObject } from '../../providers/types.js';
import { chatOptions } from './chat-options.js';
import type { ItemResolver } from './input.js';
import {
  functionCallItem,
  itemId,
  messageItem,
  newItemId,
  outcomeOf,
  reasoningItem,
  refusalPart,
  responseObject,
  responseUsage,
  textPart,
} from './response.js';
import { type ChatMessage, isObject, type ResponseMeta, reasoningOf } from './types.js';
import { inputMessages, passthroughParams } from './validate.js';

export { hasImages, type ItemResolver } from './input.js';
export { assistantTurn, responseOfItem } from './response.js';
export { chatStreamToResponseEvents } from './stream.js';
export type { ChatMessage, ResponseMeta } from './types.js';
export { type ValidateOptions, validateResponsesRequest } from './validate.js';

/** Responses parameters that chat completions takes under the same name and meaning. */
const SAME_NAME = [
  'temperature',
  'top_p',
  'user',
  'safety_identifier',
  'prompt_cache_key',
  'prompt_cache_retention',
];

/**
 * The chat body for a validated request, and the conversation to remember: `previous` (the history of
 * previous_response_id) plus this request's input. Instructions go to the chat body only: OpenAI does not
 * carry a response's instructions over to the next one.
 */
export function responsesToChat(
  req: JsonObject,
  previous: ChatMessage[],
  resolve?: ItemResolver,
): { chatBody: JsonObject; conversation: ChatMessage[] } {
  const conversation = [...previous, ...withoutKnownCalls(inputMessages(req.input, resolve), previous)];
  const instructions =
    typeof req.instructions === 'string' && req.instructions !== '' ? req.instructions : null;
  const messages: ChatMessage[] = instructions
    ? [{ role: 'system', content: instructions }, ...conversation]
    : conversation;
  const chatBody: JsonObject = { ...passthroughParams(req), model: req.model, messages, ...chatOptions(req) };
  if (typeof req.max_output_tokens === 'number') chatBody.max_tokens = req.max_output_tokens;
  for (const name of SAME_NAME) {
    if (req[name] !== undefined && req[name] !== null) chatBody[name] = req[name];
  }
  if (req.stream === true) {
    chatBody.stream = true;
    // The final Response reports usage, so ask for it whether or not the client would have.
    chatBody.stream_options = { include_usage: true };
  }
  return { chatBody, conversation };
}

/**
 * Input messages less the function calls the history already holds: a client that sends a previous
 * answer's function_call items back beside previous_response_id must not make chat see each call twice.
 */
function withoutKnownCalls(messages: ChatMessage[], previous: ChatMessage[]): ChatMessage[] {
  const known = new Set(previous.flatMap((m) => (m.tool_calls ?? []).map((c) => c.id)));
  if (known.size === 0) return messages;
  const out: ChatMessage[] = [];
  for (const m of messages) {
    if (!m.tool_calls) {
      out.push(m);
      continue;
    }
    // A turn whose calls are all known is that previous turn, text and all.
    const calls = m.tool_calls.filter((c) => !known.has(c.id));
    if (calls.length > 0) out.push({ ...m, tool_calls: calls });
  }
  return out;
}

/**
 * A non-streamed chat.completion → the Response object: the reasoning item (reasoningOf),
 * the message item (its text and refusal parts; left out when the model only called tools), then one
 * function_call item per tool call.
 */
export function chatCompletionToResponse(completion: JsonObject, meta: ResponseMeta): JsonObject {
  const choices = Array.isArray(completion.choices) ? completion.choices : [];
  const choice: unknown = choices.find((c: unknown) => isObject(c) && (c.index ?? 0) === 0) ?? choices[0];
  const message = isObject(choice) && isObject(choice.message) ? choice.message : {};
  const parts = messageParts(message);
  const reasoning = reasoningOf(message);
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObject) : [];
  const outcome = outcomeOf(isObject(choice) ? choice.finish_reason : undefined);
  const output: JsonObject[] = [];
  const id = (prefix: 'msg' | 'fc' | 'rs') => itemId(meta.id, prefix, output.length);
  const thinking = Array.isArray(message.thinking_blocks) ? message.thinking_blocks : [];
  if (reasoning !== '' || thinking.length > 0) {
    output.push(reasoningItem(id('rs'), outcome.status, reasoning, thinking));
  }
  if (parts.length > 0 || calls.length === 0) {
    output.push(messageItem(id('msg'), outcome.status, parts.length > 0 ? parts : [textPart('')]));
  }
  for (const call of calls) {
    const fn = isObject(call.function) ? call.function : {};
    output.push(
      functionCallItem(id('fc'), outcome.status, {
        callId: typeof call.id === 'string' ? call.id : newItemId('fc'),
        name: typeof fn.name === 'string' ? fn.name : '',
        arguments: typeof fn.arguments === 'string' ? fn.arguments : '',
      }),
    );
  }
  return responseObject(meta, {
    status: outcome.status,
    ...(outcome.reason ? { reason: outcome.reason } : {}),
    output,
    usage: responseUsage(completion.usage),
  });
}

/**
 * A chat message's content and refusal as Response content parts, in the order of the message's own
 * fields (JSON.parse keeps it): chat has no order between them, the upstream's is the best there is.
 */
function messageParts(message: JsonObject): JsonObject[] {
  const parts: JsonObject[] = [];
  for (const [field, value] of Object.entries(message)) {
    if (typeof value !== 'string' || value === '') continue;
    if (field === 'content') parts.push(textPart(value));
    else if (field === 'refusal') parts.push(refusalPart(value));
  }
  return parts;
}
