/**
 * The Responses options that chat completions has under other shapes: function `tools`, `tool_choice`,
 * `text.format` (structured output) and `reasoning.effort`. Each is checked (an honest 400 for what chat
 * cannot do) and written as chat's; the Response echoes them as OpenAI does (echo*).
 */
import type { JsonObject } from '../../providers/types.js';
import { invalidParameter } from '../errors.js';
import { isObject } from './types.js';

const absent = (v: unknown): v is null | undefined => v === undefined || v === null;
const TOOL_CHOICE_MODES: ReadonlySet<string> = new Set(['auto', 'none', 'required']);
const EFFORTS: ReadonlySet<string> = new Set(['none', 'minimal', 'low', 'medium', 'high', 'xhigh']);
const SUMMARIES: ReadonlySet<string> = new Set(['auto', 'concise', 'detailed']);

/** Checks tools, tool_choice, text.format and reasoning; throws naming the parameter at fault. */
export function checkChatOptions(req: JsonObject): void {
  const names = checkTools(req.tools);
  checkToolChoice(req.tool_choice, names);
  checkFormat(req.text);
  checkReasoning(req.reasoning);
  if (names.size > 0 && !absent(req.max_tool_calls)) {
    throw invalidParameter(
      'max_tool_calls',
      'max_tool_calls is not supported for this model: chat completions cannot bound the number of tool calls',
    );
  }
}

/** The chat body's fields for these options (only those the request set). */
export function chatOptions(req: JsonObject): JsonObject {
  const out: JsonObject = {};
  // Chat refuses tool_choice and parallel_tool_calls without tools; without tools no call is made anyway.
  if (Array.isArray(req.tools) && req.tools.length > 0) {
    out.tools = req.tools.map(chatTool);
    if (typeof req.tool_choice === 'string') out.tool_choice = req.tool_choice;
    else if (isObject(req.tool_choice)) {
      out.tool_choice = { type: 'function', function: { name: req.tool_choice.name } };
    }
    if (typeof req.parallel_tool_calls === 'boolean') out.parallel_tool_calls = req.parallel_tool_calls;
  }
  const format = isObject(req.text) && isObject(req.text.format) ? req.text.format : undefined;
  if (format?.type === 'json_object') out.response_format = { type: 'json_object' };
  if (format?.type === 'json_schema') {
    const jsonSchema: JsonObject = { name: format.name, schema: format.schema };
    if (typeof format.description === 'string') jsonSchema.description = format.description;
    if (typeof format.strict === 'boolean') jsonSchema.strict = format.strict;
    out.response_format = { type: 'json_schema', json_schema: jsonSchema };
  }
  if (isObject(req.reasoning) && typeof req.reasoning.effort === 'string') {
    out.reasoning_effort = req.reasoning.effort;
  }
  return out;
}

/** A Responses function tool → chat's `{type:'function', function:{…}}`. */
function chatTool(tool: JsonObject): JsonObject {
  const fn: JsonObject = { name: tool.name };
  if (typeof tool.description === 'string') fn.description = tool.description;
  if (isObject(tool.parameters)) fn.parameters = tool.parameters;
  if (typeof tool.strict === 'boolean') fn.strict = tool.strict;
  return { type: 'function', function: fn };
}

/** The Response's `tools`: each function tool with every field OpenAI's FunctionTool requires. */
export function echoTools(req: JsonObject): JsonObject[] {
  if (!Array.isArray(req.tools)) return [];
  return req.tools.map((tool: JsonObject) => ({
    type: 'function',
    name: tool.name,
    description: typeof tool.description === 'string' ? tool.description : null,
    parameters: isObject(tool.parameters) ? tool.parameters : null,
    // Chat completions' default: not strict unless asked.
    strict: typeof tool.strict === 'boolean' ? tool.strict : false,
  }));
}

export function echoText(req: JsonObject): JsonObject {
  const format = isObject(req.text) && isObject(req.text.format) ? req.text.format : { type: 'text' };
  return { format, verbosity: 'medium' };
}

export function echoReasoning(req: JsonObject): JsonObject {
  const r = isObject(req.reasoning) ? req.reasoning : {};
  return { effort: r.effort ?? null, summary: r.summary ?? null };
}

/** The names of the function tools (empty without tools). */
function checkTools(tools: unknown): Set<string> {
  const names = new Set<string>();
  if (absent(tools)) return names;
  if (!Array.isArray(tools)) throw invalidParameter('tools', 'tools must be an array');
  tools.forEach((tool: unknown, i) => {
    const where = `tools[${i}]`;
    if (!isObject(tool)) throw invalidParameter(where, `${where} must be an object`);
    if (tool.type !== 'function') {
      throw invalidParameter(
        `${where}.type`,
        `${where}.type ${JSON.stringify(tool.type)} is not supported for this model: only function tools can be bridged onto chat completions`,
      );
    }
    if (typeof tool.name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(tool.name)) {
      throw invalidParameter(
        `${where}.name`,
        `${where}.name must be 1 to 64 letters, digits, underscores or dashes`,
      );
    }
    if (!absent(tool.description) && typeof tool.description !== 'string') {
      throw invalidParameter(`${where}.description`, `${where}.description must be a string`);
    }
    if (!absent(tool.parameters) && !isObject(tool.parameters)) {
      throw invalidParameter(`${where}.parameters`, `${where}.parameters must be a JSON schema object`);
    }
    if (!absent(tool.strict) && typeof tool.strict !== 'boolean') {
      throw invalidParameter(`${where}.strict`, `${where}.strict must be a boolean`);
    }
    names.add(tool.name);
  });
  return names;
}

function checkToolChoice(choice: unknown, names: ReadonlySet<string>): void {
  if (absent(choice)) return;
  if (typeof choice === 'string') {
    if (!TOOL_CHOICE_MODES.has(choice)) {
      throw invalidParameter('tool_choice', 'tool_choice must be auto, none, required or a function');
    }
    if (choice === 'required' && names.size === 0) {
      throw invalidParameter('tool_choice', 'tool_choice required needs at least one function tool');
    }
    return;
  }
  if (!isObject(choice) || choice.type !== 'function') {
    const type = isObject(choice) ? JSON.stringify(choice.type) : 'this value';
    throw invalidParameter(
      'tool_choice',
      `tool_choice ${type} is not supported for this model: use auto, none, required or {"type": "function", "name": …}`,
    );
  }
  if (typeof choice.name !== 'string' || !names.has(choice.name)) {
    throw invalidParameter('tool_choice.name', 'tool_choice.name must name one of the function tools');
  }
}

function checkFormat(text: unknown): void {
  if (!isObject(text) || absent(text.format)) return;
  const format = text.format;
  if (!isObject(format) || typeof format.type !== 'string') {
    throw invalidParameter('text.format', 'text.format must be an object with a type');
  }
  if (format.type === 'text' || format.type === 'json_object') return;
  if (format.type !== 'json_schema') {
    throw invalidParameter(
      'text.format.type',
      `text.format ${JSON.stringify(format.type)} is not supported for this model: use text, json_object or json_schema`,
    );
  }
  if (typeof format.name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(format.name)) {
    throw invalidParameter(
      'text.format.name',
      'text.format.name must be 1 to 64 letters, digits, underscores or dashes',
    );
  }
  if (!isObject(format.schema)) {
    throw invalidParameter('text.format.schema', 'text.format.schema must be a JSON schema object');
  }
  if (!absent(format.strict) && typeof format.strict !== 'boolean') {
    throw invalidParameter('text.format.strict', 'text.format.strict must be a boolean');
  }
  if (!absent(format.description) && typeof format.description !== 'string') {
    throw invalidParameter('text.format.description', 'text.format.description must be a string');
  }
}

/**
 * reasoning.effort becomes chat's reasoning_effort. A summary cannot be asked of a chat upstream: the
 * reasoning item carries the model's own reasoning text instead, so `summary` is accepted and has no effect.
 */
function checkReasoning(reasoning: unknown): void {
  if (absent(reasoning)) return;
  if (!isObject(reasoning)) throw invalidParameter('reasoning', 'reasoning must be an object');
  const { effort, summary, generate_summary, ...rest } = reasoning;
  if (!absent(effort) && (typeof effort !== 'string' || !EFFORTS.has(effort))) {
    throw invalidParameter('reasoning.effort', `reasoning.effort must be one of ${[...EFFORTS].join(', ')}`);
  }
  for (const [name, value] of [
    ['summary', summary],
    ['generate_summary', generate_summary],
  ] as const) {
    if (!absent(value) && (typeof value !== 'string' || !SUMMARIES.has(value))) {
      throw invalidParameter(`reasoning.${name}`, `reasoning.${name} must be auto, concise or detailed`);
    }
  }
  for (const [name, value] of Object.entries(rest)) {
    if (!absent(value)) {
      throw invalidParameter(`reasoning.${name}`, `reasoning.${name} is not supported for this model`);
    }
  }
}
