/**
 * OpenAI chat completions request → Anthropic Messages API request (the conversation itself: messages.ts).
 * Pure: every mapping decision is unit-tested (test/providers/anthropic-request.test.ts); anthropic.ts
 * only does the HTTP.
 *
 * Wire format: https://docs.anthropic.com/en/api/messages, tool use, vision and extended thinking.
 * What is mapped and what is refused is listed in README.md ("Anthropic models").
 */
import { invalidParameter, ProviderRequestError } from '../request-error.js';
import type { JsonObject } from '../types.js';
import { type AnthropicMessageParam, mapMessages } from './messages.js';
import { isObject } from './util.js';

export type { AnthropicBlock, AnthropicMessageParam } from './messages.js';

export interface AnthropicTool {
  name: string;
  description?: string;
  input_schema: JsonObject;
}

export type AnthropicToolChoice =
  | { type: 'auto' | 'any'; disable_parallel_tool_use?: boolean }
  | { type: 'tool'; name: string; disable_parallel_tool_use?: boolean }
  | { type: 'none' };

/** The subset of the Messages API request this adapter produces. */
export interface AnthropicRequest {
  model: string;
  messages: AnthropicMessageParam[];
  max_tokens: number;
  system?: string;
  stop_sequences?: string[];
  temperature?: number;
  top_p?: number;
  stream?: boolean;
  metadata?: { user_id: string };
  tools?: AnthropicTool[];
  tool_choice?: AnthropicToolChoice;
  thinking?: { type: 'enabled'; budget_tokens: number };
}

/** A request and what the answer's translation must know about it. */
export interface TranslatedRequest {
  request: AnthropicRequest;
  /**
   * Structured output: the name of the forced tool whose input is the answer. Its tool_use becomes the
   * message's content (JSON text), not a tool call, and its stop reason `stop`.
   */
  jsonTool?: string;
}

/**
 * OpenAI parameters this adapter cannot honour, each with the values that mean "feature off" and so
 * may pass. Anything else is an honest 400: a silently ignored `seed` or `n` would look like it
 * worked while changing the answer's meaning.
 */
const UNSUPPORTED: ReadonlyArray<{ param: string; harmless: (value: unknown) => boolean; why: string }> = [
  { param: 'n', harmless: (v) => v === 1, why: 'only n = 1 is supported' },
  { param: 'logprobs', harmless: (v) => v === false, why: 'log probabilities are not available' },
  { param: 'top_logprobs', harmless: (v) => v === 0, why: 'log probabilities are not available' },
  // The legacy function-calling API would need its own answer shape (message.function_call) in JSON and
  // in streams; every current client sends `tools`, which are translated.
  {
    param: 'functions',
    harmless: isEmptyArray,
    why: 'the deprecated functions API is not supported (use tools)',
  },
  {
    param: 'function_call',
    harmless: (v) => v === 'none',
    why: 'the deprecated functions API is not supported (use tools and tool_choice)',
  },
  { param: 'audio', harmless: () => false, why: 'audio output is not supported' },
  {
    param: 'modalities',
    harmless: (v) => Array.isArray(v) && v.every((m) => m === 'text'),
    why: 'only text output is supported',
  },
  { param: 'presence_penalty', harmless: (v) => v === 0, why: 'presence_penalty is not supported' },
  { param: 'frequency_penalty', harmless: (v) => v === 0, why: 'frequency_penalty is not supported' },
  {
    param: 'logit_bias',
    harmless: (v) => isObject(v) && Object.keys(v).length === 0,
    why: 'logit_bias is not supported',
  },
  { param: 'seed', harmless: () => false, why: 'seeded sampling is not supported' },
  { param: 'prediction', harmless: () => false, why: 'predicted outputs are not supported' },
  { param: 'web_search_options', harmless: () => false, why: 'web search is not supported' },
  { param: 'verbosity', harmless: () => false, why: 'verbosity is not supported' },
  { param: 'store', harmless: (v) => v === false, why: 'stored completions are not supported' },
];

/** Anthropic's temperature range is 0..1; OpenAI's is 0..2 and means something else above 1. */
const MAX_TEMPERATURE = 1;

/**
 * reasoning_effort → thinking budget_tokens. Anthropic's minimum budget is 1024 and the budget must be
 * below max_tokens (which, as OpenAI's max_completion_tokens, counts the reasoning too): the budget is
 * min(this, max_tokens − 1), and a max_tokens too small for 1024 is a 400. `none` turns thinking off.
 */
export const THINKING_BUDGETS: Readonly<Record<string, number>> = {
  minimal: 1024,
  low: 2048,
  medium: 8192,
  high: 16384,
  xhigh: 32768,
  max: 65536,
};
const MIN_THINKING_BUDGET = 1024;
/** With thinking, Anthropic takes top_p only from 0.95 to 1. */
const MIN_TOP_P_WITH_THINKING = 0.95;

/** json_object has no schema: the forced tool takes any object. */
const JSON_OBJECT_TOOL = 'json_object';

/**
 * Maps a validated OpenAI chat request (defaults applied, `model` already the upstream's name) onto a
 * Messages API request. Throws ProviderRequestError for anything the backend cannot honour, before any network.
 */
export function translateRequest(body: JsonObject): TranslatedRequest {
  rejectUnsupported(body);
  const { system, messages } = mapMessages(body.messages);
  const request: AnthropicRequest = {
    model: String(body.model),
    messages,
    max_tokens: maxTokens(body),
  };
  if (system !== undefined) request.system = system;
  const stop = stopSequences(body.stop);
  if (stop.length > 0) request.stop_sequences = stop;
  // Anthropic's newer models refuse the two together ("temperature and top_p cannot both be specified
  // for this model", a 400), and a model's defaults may well set both: temperature wins (README.md,
  // "Anthropic models").
  const temperature = temperatureOf(body.temperature);
  if (temperature !== undefined) request.temperature = temperature;
  else if (typeof body.top_p === 'number') request.top_p = body.top_p;
  if (body.stream === true) request.stream = true;
  // safety_identifier is OpenAI's newer name for the same end-user id.
  const user = nonEmptyString(body.user) ?? nonEmptyString(body.safety_identifier);
  if (user !== undefined) request.metadata = { user_id: user };

  const tools = mapTools(body);
  const structured = structuredOutput(body.response_format);
  let jsonTool: string | undefined;
  if (structured !== undefined) {
    jsonTool = structured.name;
    Object.assign(request, withAnswerTool(structured, tools));
  } else if (tools.tools !== undefined) {
    request.tools = tools.tools;
    if (tools.choice !== undefined) request.tool_choice = tools.choice;
  }

  const budget = thinkingBudget(body.reasoning_effort, request.max_tokens);
  if (budget !== undefined) {
    checkThinkingCompatible(request, jsonTool !== undefined);
    request.thinking = { type: 'enabled', budget_tokens: budget };
  }
  return jsonTool === undefined ? { request } : { request, jsonTool };
}

/** The request alone, for callers that need no answer context. */
export function toAnthropicRequest(body: JsonObject): AnthropicRequest {
  return translateRequest(body).request;
}

function rejectUnsupported(body: JsonObject): void {
  for (const { param, harmless, why } of UNSUPPORTED) {
    const value = body[param];
    if (value === undefined || value === null || harmless(value)) continue;
    throw invalidParameter(param, `${param}: ${why} by this model's provider`);
  }
}

function maxTokens(body: JsonObject): number {
  // max_completion_tokens is the newer spelling; prefer it when a client sends both.
  const value = body.max_completion_tokens ?? body.max_tokens;
  if (typeof value === 'number' && Number.isInteger(value) && value > 0) return value;
  throw new ProviderRequestError(
    'missing_required_field',
    'max_tokens (or max_completion_tokens) is required for this model',
    'max_tokens',
  );
}

function temperatureOf(value: unknown): number | undefined {
  if (typeof value !== 'number') return undefined;
  if (value > MAX_TEMPERATURE) {
    throw invalidParameter(
      'temperature',
      `temperature must be from 0 to ${MAX_TEMPERATURE} for this model (its provider's range)`,
    );
  }
  return value;
}

function stopSequences(stop: unknown): string[] {
  if (typeof stop === 'string') return [stop];
  if (Array.isArray(stop)) return stop.filter((s): s is string => typeof s === 'string');
  return [];
}

// ---------------------------------------------------------------------------------------------------
// Tools, structured output, thinking
// ---------------------------------------------------------------------------------------------------

function mapTools(body: JsonObject): { tools?: AnthropicTool[]; choice?: AnthropicToolChoice } {
  const raw = body.tools;
  const list = raw === undefined || raw === null ? [] : raw;
  if (!Array.isArray(list)) throw invalidParameter('tools', 'tools must be an array');
  let tools = list.map(toolOf);
  let choiceValue = body.tool_choice;
  if (isObject(choiceValue) && choiceValue.type === 'allowed_tools') {
    ({ tools, choice: choiceValue } = allowedTools(choiceValue, tools));
  }
  const choice = toolChoiceOf(choiceValue, tools);
  if (tools.length === 0) return {};
  // parallel_tool_calls: false is Anthropic's disable_parallel_tool_use, which lives on tool_choice.
  if (body.parallel_tool_calls === false && choice?.type !== 'none') {
    return { tools, choice: { ...(choice ?? { type: 'auto' }), disable_parallel_tool_use: true } };
  }
  return choice === undefined ? { tools } : { tools, choice };
}

function toolOf(tool: unknown, i: number): AnthropicTool {
  const where = `tools[${i}]`;
  if (!isObject(tool) || tool.type !== 'function' || !isObject(tool.function)) {
    const type = isObject(tool) ? String(tool.type) : typeof tool;
    throw invalidParameter(where, `${where}: ${type} tools are not supported by this model's provider`);
  }
  const fn = tool.function;
  if (typeof fn.name !== 'string' || fn.name === '') {
    throw invalidParameter(`${where}.function.name`, `${where}.function.name is required`);
  }
  const out: AnthropicTool = {
    name: fn.name,
    input_schema: objectSchema(fn.parameters, `${where}.function.parameters`),
  };
  if (typeof fn.description === 'string' && fn.description !== '') out.description = fn.description;
  return out;
}

/** Anthropic's input_schema must be an object schema; OpenAI lets `parameters` be left out (no arguments). */
function objectSchema(schema: unknown, where: string): JsonObject {
  if (schema === undefined || schema === null) return { type: 'object', properties: {} };
  if (!isObject(schema)) throw invalidParameter(where, `${where} must be a JSON Schema object`);
  if (schema.type === undefined) return { type: 'object', ...schema };
  if (schema.type !== 'object') {
    throw invalidParameter(where, `${where}: this model's provider takes only schemas of type "object"`);
  }
  return schema;
}

/**
 * tool_choice allowed_tools: Anthropic has no such list, so only the allowed tools are sent, and its
 * mode (auto, required) becomes the tool_choice for them.
 */
function allowedTools(
  value: JsonObject,
  tools: AnthropicTool[],
): { tools: AnthropicTool[]; choice: 'auto' | 'required' } {
  const spec = isObject(value.allowed_tools) ? value.allowed_tools : {};
  const mode = spec.mode;
  if (mode !== 'auto' && mode !== 'required') {
    throw invalidParameter(
      'tool_choice.allowed_tools.mode',
      'tool_choice.allowed_tools.mode must be auto or required',
    );
  }
  const listed = Array.isArray(spec.tools) ? spec.tools : [];
  const names = new Set<string>();
  for (const [i, t] of listed.entries()) {
    const name = isObject(t) && isObject(t.function) ? t.function.name : undefined;
    if (typeof name !== 'string' || !tools.some((tool) => tool.name === name)) {
      throw invalidParameter(
        `tool_choice.allowed_tools.tools[${i}]`,
        `tool_choice.allowed_tools.tools[${i}] must name a function that is in tools`,
      );
    }
    names.add(name);
  }
  if (names.size === 0) {
    throw invalidParameter(
      'tool_choice.allowed_tools.tools',
      'tool_choice.allowed_tools.tools must list a tool',
    );
  }
  return { tools: tools.filter((t) => names.has(t.name)), choice: mode };
}

function toolChoiceOf(value: unknown, tools: AnthropicTool[]): AnthropicToolChoice | undefined {
  if (value === undefined || value === null) return undefined;
  if (tools.length === 0) {
    // Without tools, "none" and "auto" mean what not sending tools means; anything else cannot be met.
    if (value === 'none' || value === 'auto') return undefined;
    throw invalidParameter('tool_choice', 'tool_choice needs tools');
  }
  if (value === 'none') return { type: 'none' };
  if (value === 'auto') return { type: 'auto' };
  if (value === 'required') return { type: 'any' };
  if (isObject(value) && value.type === 'function' && isObject(value.function)) {
    const name = value.function.name;
    if (typeof name !== 'string' || !tools.some((t) => t.name === name)) {
      throw invalidParameter(
        'tool_choice',
        `tool_choice names a function that is not in tools: ${String(name)}`,
      );
    }
    return { type: 'tool', name };
  }
  throw invalidParameter('tool_choice', "tool_choice: this value is not supported by this model's provider");
}

/** response_format → the forced tool that carries the answer; undefined for text (or none). */
function structuredOutput(value: unknown): AnthropicTool | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isObject(value)) throw invalidParameter('response_format', 'response_format must be an object');
  switch (value.type) {
    case 'text':
      return undefined;
    case 'json_object':
      return {
        name: JSON_OBJECT_TOOL,
        description: 'Answer with a JSON object: the input of this tool is the answer.',
        input_schema: { type: 'object' },
      };
    case 'json_schema': {
      const spec = isObject(value.json_schema) ? value.json_schema : {};
      const name = nonEmptyString(spec.name);
      if (name === undefined) {
        throw invalidParameter(
          'response_format.json_schema.name',
          'response_format.json_schema.name is required',
        );
      }
      const description = nonEmptyString(spec.description);
      return {
        name,
        description: `Answer with this tool: its input is the answer.${description ? ` ${description}` : ''}`,
        input_schema: objectSchema(spec.schema, 'response_format.json_schema.schema'),
      };
    }
    default:
      throw invalidParameter(
        'response_format',
        `response_format: ${String(value.type)} is not supported by this model's provider`,
      );
  }
}

/**
 * Structured output is a tool the model must call. Alone, it is forced by name. Beside the client's own
 * tools the model must call one of them or the answer tool (tool_choice `any`): OpenAI's meaning of tools
 * with a response format (call tools, or answer in the schema), except that a model cannot answer in
 * free text. A named tool_choice keeps forcing that tool; `none` leaves only the answer tool.
 */
function withAnswerTool(
  answer: AnthropicTool,
  client: { tools?: AnthropicTool[]; choice?: AnthropicToolChoice },
): { tools: AnthropicTool[]; tool_choice: AnthropicToolChoice } {
  const own = client.tools ?? [];
  const choice = client.choice;
  if (own.length === 0 || choice?.type === 'none') {
    // One answer: two calls of the answer tool would be two JSON documents for one content.
    return {
      tools: [answer],
      tool_choice: { type: 'tool', name: answer.name, disable_parallel_tool_use: true },
    };
  }
  if (own.some((t) => t.name === answer.name)) {
    throw invalidParameter(
      'response_format.json_schema.name',
      `response_format.json_schema.name ${answer.name} is also the name of a tool: on this model's provider the answer is a tool call, so the names must differ`,
    );
  }
  if (choice?.type === 'tool') return { tools: [...own, answer], tool_choice: choice };
  const parallel =
    choice?.type === 'auto' || choice?.type === 'any' ? choice.disable_parallel_tool_use : undefined;
  return {
    tools: [...own, answer],
    tool_choice:
      parallel === undefined ? { type: 'any' } : { type: 'any', disable_parallel_tool_use: parallel },
  };
}

function thinkingBudget(effort: unknown, maxTokens: number): number | undefined {
  if (effort === undefined || effort === null || effort === 'none') return undefined;
  const budget = typeof effort === 'string' ? THINKING_BUDGETS[effort] : undefined;
  if (budget === undefined) {
    throw invalidParameter('reasoning_effort', `reasoning_effort: ${String(effort)} is not a known effort`);
  }
  const fitted = Math.min(budget, maxTokens - 1);
  if (fitted < MIN_THINKING_BUDGET) {
    throw invalidParameter(
      'reasoning_effort',
      `reasoning_effort needs max_tokens above ${MIN_THINKING_BUDGET} on this model (its provider's smallest thinking budget)`,
    );
  }
  return fitted;
}

/** Anthropic's rules for thinking (extended thinking docs), refused here with the OpenAI parameter's name. */
function checkThinkingCompatible(request: AnthropicRequest, structured: boolean): void {
  if (request.temperature !== undefined && request.temperature !== 1) {
    throw invalidParameter(
      'temperature',
      'temperature must be 1 or unset with reasoning_effort on this model',
    );
  }
  if (request.top_p !== undefined && request.top_p < MIN_TOP_P_WITH_THINKING) {
    throw invalidParameter(
      'top_p',
      `top_p must be from ${MIN_TOP_P_WITH_THINKING} to 1 with reasoning_effort on this model`,
    );
  }
  const forced = request.tool_choice?.type;
  if (forced === 'any' || forced === 'tool') {
    throw invalidParameter(
      structured ? 'response_format' : 'tool_choice',
      structured
        ? 'response_format json_schema/json_object cannot be combined with reasoning_effort on this model (its provider answers in JSON through a forced tool call, which thinking does not allow)'
        : 'tool_choice required or a named function cannot be combined with reasoning_effort on this model (its provider does not force tool calls while thinking)',
    );
  }
}

function isEmptyArray(value: unknown): boolean {
  return Array.isArray(value) && value.length === 0;
}

function nonEmptyString(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined;
}
