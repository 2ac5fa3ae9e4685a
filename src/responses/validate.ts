import type { JsonObject } from '../../providers/types.js';
import { invalidParameter } from '../errors.js';
import {
  checkBoolean,
  checkNumber,
  checkPositiveInt,
  requireModel,
  requireObject,
} from '../inference/validate.js';
import { type ChatMessage, isObject } from './types.js';

/** Every parameter of OpenAI's CreateResponse: none of them is forwarded to chat as it is. */
const RESPONSES_PARAMS = new Set([
  'background',
  'context_management',
  'conversation',
  'include',
  'input',
  'instructions',
  'max_output_tokens',
  'max_tool_calls',
  'metadata',
  'model',
  'moderation',
  'parallel_tool_calls',
  'previous_response_id',
  'prompt',
  'prompt_cache_key',
  'prompt_cache_options',
  'prompt_cache_retention',
  'reasoning',
  'safety_identifier',
  'service_tier',
  'store',
  'stream',
  'stream_options',
  'temperature',
  'text',
  'tool_choice',
  'tools',
  'top_logprobs',
  'top_p',
  'truncation',
  'user',
]);

/**
 * Chat parameters that would fight the bridge (it writes messages and max_tokens itself) or ask for
 * output a Response built from one text message cannot carry.
 */
const CHAT_ONLY: Record<string, string> = {
  messages: 'messages is not a Responses parameter: send input (and instructions) instead',
  max_tokens: 'max_tokens is not a Responses parameter: use max_output_tokens',
  max_completion_tokens: 'max_completion_tokens is not a Responses parameter: use max_output_tokens',
  response_format: 'response_format is not a Responses parameter: use text.format',
  n: 'n is not supported: a Response carries one answer',
  functions: 'functions is not supported: this model is served without tool calling',
  function_call: 'function_call is not supported: this model is served without tool calling',
  logprobs: 'logprobs is not supported for this model',
  audio: 'audio output is not supported for this model',
  modalities: 'modalities is not supported for this model',
  prediction: 'prediction is not supported for this model',
  web_search_options: 'web search is not supported for this model',
};

const absent = (v: unknown): v is null | undefined => v === undefined || v === null;

interface Unsupported {
  param: string;
  /** The values the bridge honours (by doing nothing, as OpenAI would with them). */
  accepts: (value: unknown) => boolean;
  message: string;
}

/** Responses features chat completions cannot provide: an honest 400 rather than a silent ignore. */
const UNSUPPORTED: Unsupported[] = [
  {
    param: 'tools',
    accepts: (v) => absent(v) || (Array.isArray(v) && v.length === 0),
    message:
      'tools are not supported for this model: it is served through chat completions without tool calling',
  },
  {
    param: 'tool_choice',
    accepts: (v) => absent(v) || v === 'none' || v === 'auto',
    message: 'tool_choice must be none or auto: this model is served without tools',
  },
  {
    param: 'reasoning',
    accepts: (v) => absent(v) || (isObject(v) && Object.values(v).every(absent)),
    message: 'reasoning options are not supported for this model',
  },
  {
    param: 'background',
    accepts: (v) => absent(v) || v === false,
    message: 'background responses are not supported for this model',
  },
  {
    param: 'include',
    accepts: (v) => absent(v) || (Array.isArray(v) && v.length === 0),
    message: 'include is not supported for this model: its output is one text message',
  },
  {
    param: 'top_logprobs',
    accepts: (v) => absent(v) || v === 0,
    message: 'top_logprobs is not supported for this model',
  },
  {
    param: 'truncation',
    accepts: (v) => absent(v) || v === 'disabled',
    message: 'truncation must be disabled for this model',
  },
  {
    param: 'service_tier',
    accepts: (v) => absent(v) || v === 'auto' || v === 'default',
    message: 'service_tier must be auto or default for this model',
  },
  {
    param: 'conversation',
    accepts: absent,
    message: 'conversation is not supported: use previous_response_id',
  },
  { param: 'prompt', accepts: absent, message: 'prompt templates are not supported' },
  {
    param: 'context_management',
    accepts: absent,
    message: 'context_management is not supported for this model',
  },
  { param: 'moderation', accepts: absent, message: 'moderation is not supported for this model' },
  {
    param: 'prompt_cache_options',
    accepts: absent,
    message: 'prompt_cache_options is not supported for this model',
  },
];

const INPUT_ROLES: ReadonlySet<string> = new Set(['user', 'assistant', 'system', 'developer']);
const METADATA_MAX_KEYS = 16;
const METADATA_MAX_KEY_LENGTH = 64;
const METADATA_MAX_VALUE_LENGTH = 512;

export interface ValidateOptions {
  /**
   * false for an upstream that speaks the Responses API itself: only the spec's parameters (4.10) are
   * checked, and tools, images, JSON formats … are left for the upstream to honour. Default true.
   */
  bridged?: boolean;
}

/**
 * POST /v1/responses (spec 4.10). Returns the body itself; when bridged, parameters unknown to the
 * Responses API are left in it, to be passed on to the chat upstream.
 */
export function validateResponsesRequest(body: unknown, options: ValidateOptions = {}): JsonObject {
  const req = requireObject(body);
  requireModel(req);
  const bridged = options.bridged ?? true;
  if (bridged) inputMessages(req.input);
  else checkInputShape(req.input);
  checkOptionalString(req, 'instructions');
  checkPreviousResponseId(req);
  checkBoolean(req, 'stream');
  checkBoolean(req, 'store');
  checkPositiveInt(req, 'max_output_tokens');
  checkNumber(req, 'temperature', 0, 2);
  checkNumber(req, 'top_p', 0, 1);
  checkMetadata(req);
  if (bridged) checkBridgeable(req);
  return req;
}

function checkBridgeable(req: JsonObject): void {
  checkBoolean(req, 'parallel_tool_calls');
  checkMaxToolCalls(req);
  for (const name of ['user', 'safety_identifier', 'prompt_cache_key', 'prompt_cache_retention']) {
    checkOptionalString(req, name);
  }
  checkStreamOptions(req);
  checkText(req);
  for (const rule of UNSUPPORTED) {
    if (!rule.accepts(req[rule.param])) throw invalidParameter(rule.param, rule.message);
  }
  for (const [name, message] of Object.entries(CHAT_ONLY)) {
    if (req[name] !== undefined) throw invalidParameter(name, message);
  }
}

function checkInputShape(input: unknown): void {
  const ok = typeof input === 'string' || (Array.isArray(input) && input.length > 0);
  if (!ok) throw invalidParameter('input', 'input is required and must be a string or a non-empty array');
}

/** Parameters outside the Responses API (e.g. a vLLM `top_k`), handed to the upstream untouched. */
export function passthroughParams(req: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(req)) {
    if (!RESPONSES_PARAMS.has(key) && !(key in CHAT_ONLY)) out[key] = value;
  }
  return out;
}

/** The request's `input` as chat messages; throws naming the offending item, as OpenAI does. */
export function inputMessages(input: unknown): ChatMessage[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input)) {
    throw invalidParameter('input', 'input is required and must be a string or an array of input items');
  }
  if (input.length === 0) throw invalidParameter('input', 'input must not be an empty array');
  return input.map((item: unknown, i) => itemMessage(item, `input[${i}]`));
}

function itemMessage(item: unknown, where: string): ChatMessage {
  if (!isObject(item)) throw invalidParameter(where, `${where} must be an object`);
  const type = item.type ?? 'message';
  if (type !== 'message') {
    throw invalidParameter(
      `${where}.type`,
      `${where}.type ${JSON.stringify(type)} is not supported for this model: only message items can be bridged onto chat completions`,
    );
  }
  const role = item.role;
  if (typeof role !== 'string' || !INPUT_ROLES.has(role)) {
    throw invalidParameter(`${where}.role`, `${where}.role must be one of ${[...INPUT_ROLES].join(', ')}`);
  }
  const chatRole = role as ChatMessage['role'];
  return { role: chatRole, content: messageText(item.content, chatRole, `${where}.content`) };
}

function messageText(content: unknown, role: ChatMessage['role'], where: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content) || content.length === 0) {
    throw invalidParameter(where, `${where} must be a string or a non-empty array of content parts`);
  }
  const texts = content.map((part: unknown, j) => partText(part, role, `${where}[${j}]`));
  // Assistant parts are pieces of one answer (the SDK's output_text joins them the same way); input parts
  // are separate blocks, kept apart as chat templates do with text parts.
  return texts.join(role === 'assistant' ? '' : '\n');
}

/** Mirrors OpenAI: assistant messages hold output_text/refusal parts, the other roles input_text. */
function partText(part: unknown, role: ChatMessage['role'], where: string): string {
  if (!isObject(part)) throw invalidParameter(where, `${where} must be a content part object`);
  const allowed = role === 'assistant' ? ['output_text', 'refusal'] : ['input_text'];
  const type = part.type;
  if (typeof type !== 'string' || !allowed.includes(type)) {
    const supported =
      role === 'assistant' ? 'output_text and refusal' : 'input_text (this model takes text only)';
    throw invalidParameter(
      `${where}.type`,
      `${where}.type ${JSON.stringify(type)} is not supported in a ${role} message: use ${supported}`,
    );
  }
  const field = type === 'refusal' ? 'refusal' : 'text';
  const text = part[field];
  if (typeof text !== 'string')
    throw invalidParameter(`${where}.${field}`, `${where}.${field} must be a string`);
  return text;
}

function checkOptionalString(req: JsonObject, name: string): void {
  const v = req[name];
  if (!absent(v) && typeof v !== 'string') throw invalidParameter(name, `${name} must be a string`);
}

function checkPreviousResponseId(req: JsonObject): void {
  const v = req.previous_response_id;
  if (absent(v)) return;
  if (typeof v !== 'string' || v.length === 0) {
    throw invalidParameter('previous_response_id', 'previous_response_id must be a non-empty string');
  }
}

function checkMaxToolCalls(req: JsonObject): void {
  const v = req.max_tool_calls;
  // Without tools no call is ever made, so any limit is honoured.
  if (!absent(v) && (typeof v !== 'number' || !Number.isInteger(v) || v < 0)) {
    throw invalidParameter('max_tool_calls', 'max_tool_calls must be a non-negative integer');
  }
}

function checkMetadata(req: JsonObject): void {
  const metadata = req.metadata;
  if (absent(metadata)) return;
  if (!isObject(metadata)) throw invalidParameter('metadata', 'metadata must be an object of strings');
  const entries = Object.entries(metadata);
  if (entries.length > METADATA_MAX_KEYS) {
    throw invalidParameter('metadata', `metadata takes at most ${METADATA_MAX_KEYS} keys`);
  }
  for (const [key, value] of entries) {
    if (key.length > METADATA_MAX_KEY_LENGTH) {
      throw invalidParameter('metadata', `metadata keys are at most ${METADATA_MAX_KEY_LENGTH} characters`);
    }
    if (typeof value !== 'string' || value.length > METADATA_MAX_VALUE_LENGTH) {
      throw invalidParameter(
        `metadata.${key}`,
        `metadata values must be strings of at most ${METADATA_MAX_VALUE_LENGTH} characters`,
      );
    }
  }
}

function checkStreamOptions(req: JsonObject): void {
  const options = req.stream_options;
  if (absent(options)) return;
  if (!isObject(options)) throw invalidParameter('stream_options', 'stream_options must be an object');
  const obfuscation = options.include_obfuscation;
  // Obfuscation only pads events against side channels; sending none is within the option's contract.
  if (obfuscation !== undefined && typeof obfuscation !== 'boolean') {
    throw invalidParameter('stream_options.include_obfuscation', 'include_obfuscation must be a boolean');
  }
}

function checkText(req: JsonObject): void {
  const text = req.text;
  if (absent(text)) return;
  if (!isObject(text)) throw invalidParameter('text', 'text must be an object');
  const format = text.format;
  if (!absent(format)) {
    if (!isObject(format) || typeof format.type !== 'string') {
      throw invalidParameter('text.format', 'text.format must be an object with a type');
    }
    if (format.type !== 'text') {
      throw invalidParameter(
        'text.format',
        `text.format ${format.type} is not supported for this model: only plain text output is available`,
      );
    }
  }
  if (!absent(text.verbosity) && text.verbosity !== 'medium') {
    throw invalidParameter(
      'text.verbosity',
      'text.verbosity other than medium is not supported for this model',
    );
  }
}
