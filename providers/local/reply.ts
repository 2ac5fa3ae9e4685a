/**
 * What the built-in chat model answers (the rules are listed in providers/local.ts): text, a JSON
 * document, or calls of the request's tools. Pure: the provider turns the decision into JSON or chunks.
 */
import { invalidParameter } from '../request-error.js';
import type { JsonObject } from '../types.js';
import { InstanceBudget, schemaInstance } from './schema-instance.js';

export const LOCAL_REPLY_PREFIX = 'You said: ';
export const LOCAL_REPLY_SUFFIX = "This is a deterministic reply from Gantry's built-in local model.";
/** The line the text reply carries when the request holds images: `Images received: <n>`. */
export const LOCAL_IMAGES_PREFIX = 'Images received: ';
/** Each tool result the answer after a tool round quotes: `Tool <name> returned: <content>`. */
export const LOCAL_TOOL_RESULT_PREFIX = 'Tool ';

export interface LocalToolCall {
  name: string;
  /** JSON text of the arguments. */
  arguments: string;
}

export type LocalReply = { kind: 'text'; text: string } | { kind: 'tool_calls'; calls: LocalToolCall[] };

function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** String content as is; content parts: their text parts joined by newlines. */
export function messageText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const texts: string[] = [];
  for (const part of content) {
    if (isObject(part) && typeof part.text === 'string') texts.push(part.text);
  }
  return texts.join('\n');
}

export function lastUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const m: unknown = messages[i];
    if (isObject(m) && m.role === 'user') return messageText(m.content);
  }
  return '';
}

/** `image_url` parts over all messages. */
export function countImages(messages: unknown): number {
  if (!Array.isArray(messages)) return 0;
  let images = 0;
  for (const m of messages) {
    if (!isObject(m) || !Array.isArray(m.content)) continue;
    for (const part of m.content) if (isObject(part) && part.type === 'image_url') images++;
  }
  return images;
}

/** The text reply: what it said, how many images it saw (if any), and the fixed suffix. */
export function localReplyText(messages: unknown): string {
  const images = countImages(messages);
  const seen = images > 0 ? `${LOCAL_IMAGES_PREFIX}${images}\n` : '';
  return `${LOCAL_REPLY_PREFIX}${lastUserText(messages)}\n${seen}${LOCAL_REPLY_SUFFIX}`;
}

export function localReply(body: JsonObject): LocalReply {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const prefill = continuedText(body, messages);
  if (prefill !== undefined) {
    // vLLM's continue_final_message: the final assistant message is the start of the answer, which
    // goes on from there (the reply to the conversation before it, less what the prefill already says).
    const whole = localReply({ ...body, messages: messages.slice(0, -1), continue_final_message: false });
    if (whole.kind === 'text' && whole.text.startsWith(prefill)) {
      return { kind: 'text', text: whole.text.slice(prefill.length) };
    }
    return whole;
  }
  const last: unknown = messages[messages.length - 1];
  const afterToolResult = isObject(last) && last.role === 'tool';
  if (!afterToolResult) {
    const calls = toolCalls(body);
    if (calls.length > 0) return { kind: 'tool_calls', calls };
  }
  const json = jsonReply(body.response_format, lastUserText(messages));
  if (json !== undefined) return { kind: 'text', text: json };
  if (afterToolResult) return { kind: 'text', text: toolResultsText(messages) };
  return { kind: 'text', text: localReplyText(messages) };
}

/** The final assistant message's text when the request asks for it to be continued, else undefined. */
function continuedText(body: JsonObject, messages: unknown[]): string | undefined {
  if (body.continue_final_message !== true) return undefined;
  const last: unknown = messages[messages.length - 1];
  return isObject(last) && last.role === 'assistant' ? messageText(last.content) : undefined;
}

interface FunctionTool {
  name: string;
  parameters: unknown;
}

function functionTools(tools: unknown): FunctionTool[] {
  if (!Array.isArray(tools)) return [];
  const out: FunctionTool[] = [];
  for (const tool of tools) {
    if (!isObject(tool) || tool.type !== 'function' || !isObject(tool.function)) continue;
    const { name, parameters } = tool.function;
    if (typeof name === 'string' && name !== '') out.push({ name, parameters });
  }
  return out;
}

/**
 * How much of the last user message is searched for tool names: each tool's name is looked for in it,
 * so thousands of tools against a long message would block the event loop for seconds.
 */
export const TOOL_NAME_SEARCH_CHARS = 8 * 1024;

/**
 * The tools called: the forced one, else (auto, required, allowed_tools among the tools it lists) every
 * tool whose name the first TOOL_NAME_SEARCH_CHARS characters of the last user message contain, in
 * `tools` order (only the first when parallel_tool_calls is false), else the first tool.
 */
function toolCalls(body: JsonObject): LocalToolCall[] {
  let tools = functionTools(body.tools);
  const choice = body.tool_choice;
  if (tools.length === 0 || choice === 'none') return [];
  const text = lastUserText(body.messages);
  let chosen: FunctionTool[];
  if (isObject(choice) && choice.type === 'allowed_tools') {
    // Chosen as for auto/required, among the listed tools only.
    const allowed = isObject(choice.allowed_tools) ? choice.allowed_tools.tools : undefined;
    // Its entries name tools ({type: function, function: {name}}) without their definitions.
    const names = new Set(functionTools(allowed).map((t) => t.name));
    tools = tools.filter((t) => names.has(t.name));
    if (tools.length === 0) {
      throw invalidParameter(
        'tool_choice.allowed_tools.tools',
        "tool_choice.allowed_tools.tools must list some of the request's function tools",
      );
    }
  }
  if (isObject(choice) && choice.type !== 'allowed_tools') {
    const name = isObject(choice.function) ? choice.function.name : undefined;
    const tool = tools.find((t) => t.name === name);
    if (choice.type !== 'function' || tool === undefined) {
      throw invalidParameter(
        'tool_choice',
        `tool_choice must name one of the request's function tools (${tools.map((t) => t.name).join(', ')})`,
      );
    }
    chosen = [tool];
  } else {
    const lower = text.slice(0, TOOL_NAME_SEARCH_CHARS).toLowerCase();
    chosen = tools.filter((t) => lower.includes(t.name.toLowerCase()));
    if (chosen.length === 0) chosen = [tools[0] as FunctionTool];
    if (body.parallel_tool_calls === false) chosen = chosen.slice(0, 1);
  }
  // One budget for all the calls: many tools named at once must not multiply the bound.
  const budget = new InstanceBudget();
  return chosen.map((tool) => ({
    name: tool.name,
    arguments: JSON.stringify(schemaInstance(tool.parameters ?? { type: 'object' }, text, budget)),
  }));
}

/** json_schema: an instance of the schema; json_object: `{"you_said": <last user text>}`. */
function jsonReply(format: unknown, text: string): string | undefined {
  if (!isObject(format)) return undefined;
  if (format.type === 'json_object') return JSON.stringify({ you_said: text });
  if (format.type !== 'json_schema') return undefined;
  const spec = format.json_schema;
  if (!isObject(spec) || !isObject(spec.schema)) {
    throw invalidParameter(
      'response_format.json_schema.schema',
      'response_format.json_schema.schema is required',
    );
  }
  return JSON.stringify(schemaInstance(spec.schema, text));
}

/**
 * The answer after a tool round: one line per tool message at the end of the conversation,
 * `Tool <name> returned: <content>` (the name from the assistant's call of that id, else the id).
 */
function toolResultsText(messages: unknown[]): string {
  let start = messages.length;
  while (start > 0 && isObject(messages[start - 1]) && (messages[start - 1] as JsonObject).role === 'tool') {
    start--;
  }
  const names = new Map<string, string>();
  for (const m of messages.slice(0, start)) {
    if (!isObject(m) || !Array.isArray(m.tool_calls)) continue;
    for (const call of m.tool_calls) {
      if (isObject(call) && typeof call.id === 'string' && isObject(call.function)) {
        names.set(call.id, String(call.function.name));
      }
    }
  }
  const lines = messages.slice(start).map((m) => {
    const message = m as JsonObject;
    const id = typeof message.tool_call_id === 'string' ? message.tool_call_id : '';
    return `${LOCAL_TOOL_RESULT_PREFIX}${names.get(id) ?? id} returned: ${messageText(message.content)}`;
  });
  return `${lines.join('\n')}\n${LOCAL_REPLY_SUFFIX}`;
}
