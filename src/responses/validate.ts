import type { JsonObject } from '../../providers/types.js';
import { invalidParameter } from '../errors.js';
import {
  checkBoolean,
  checkNumber,
  checkPositiveInt,
  requireModel,
  requireObject,
} from '../inference/validate.js';
import { checkChatOptions } from './chat-options.js';
import { inputMessages } from './input.js';
import { isObject } from './types.js';

export { inputMessages } from './input.js';

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
 * Chat parameters that would fight the bridge (it writes messages, max_tokens, tools and response_format
 * itself) or ask for output a Response cannot carry.
 */
const CHAT_ONLY: Record<string, string> = {
  messages: 'messages is not a Responses parameter: send input (and instructions) instead',
  max_tokens: 'max_tokens is not a Responses parameter: use max_output_tokens',
  max_completion_tokens: 'max_completion_tokens is not a Responses parameter: use max_output_tokens',
  response_format: 'response_format is not a Responses parameter: use text.format',
  n: 'n is not supported: a Response carries one answer',
  functions: 'functions is not a Responses parameter: send tools',
  function_call: 'function_call is not a Responses parameter: send tool_choice',
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
    param: 'background',
    accepts: (v) => absent(v) || v === false,
    message: 'background responses are not supported for this model',
  },
  {
    param: 'include',
    // reasoning.encrypted_content lets a client pass reasoning back without store; the bridge needs none
    // back (chat upstreams take no reasoning in their input), so asking for it is honoured by omission.
    accepts: (v) => absent(v) || (Array.isArray(v) && v.every((x) => x === 'reasoning.encrypted_content')),
    message: 'include is not supported for this model, but for reasoning.encrypted_content',
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
  checkChatOptions(req);
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
  // Without tools no call is ever made, so any limit is honoured (with tools: chat-options.ts).
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
  // text.format is checked with the other options chat has under another shape (chat-options.ts).
  if (!absent(text.verbosity) && text.verbosity !== 'medium') {
    throw invalidParameter(
      'text.verbosity',
      'text.verbosity other than medium is not supported for this model',
    );
  }
}
