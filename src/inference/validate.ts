import type { JsonObject } from '../../providers/types.js';
import { GantryError, invalidParameter } from '../errors.js';

const CHAT_ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function']);
const MAX_STOP_SEQUENCES = 4;

/** The body must be a JSON object; anything else is a malformed request. */
export function requireObject(body: unknown): JsonObject {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new GantryError('INVALID_REQUEST', { message: 'The request body must be a JSON object' });
  }
  return body as JsonObject;
}

export function requireModel(body: JsonObject): string {
  const model = body.model;
  if (typeof model !== 'string' || model.length === 0) {
    throw invalidParameter('model', 'model is required and must be a non-empty string');
  }
  return model;
}

export function checkNumber(body: JsonObject, name: string, min: number, max: number): void {
  const v = body[name];
  if (v === undefined || v === null) return;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) {
    throw invalidParameter(name, `${name} must be a number from ${min} to ${max}`);
  }
}

export function checkPositiveInt(body: JsonObject, name: string, max = Number.MAX_SAFE_INTEGER): void {
  const v = body[name];
  if (v === undefined || v === null) return;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max) {
    throw invalidParameter(name, `${name} must be an integer from 1 to ${max}`);
  }
}

export function checkBoolean(body: JsonObject, name: string): void {
  const v = body[name];
  if (v !== undefined && v !== null && typeof v !== 'boolean') {
    throw invalidParameter(name, `${name} must be a boolean`);
  }
}

function checkStreamOptions(body: JsonObject): void {
  const options = body.stream_options;
  if (options === undefined || options === null) return;
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw invalidParameter('stream_options', 'stream_options must be an object');
  }
  if (body.stream !== true) {
    throw invalidParameter('stream_options', 'stream_options is only allowed when stream is true');
  }
  const includeUsage = (options as JsonObject).include_usage;
  if (includeUsage !== undefined && typeof includeUsage !== 'boolean') {
    throw invalidParameter('stream_options.include_usage', 'include_usage must be a boolean');
  }
}

function checkStop(body: JsonObject): void {
  const stop = body.stop;
  if (stop === undefined || stop === null || typeof stop === 'string') return;
  if (!Array.isArray(stop) || stop.some((s) => typeof s !== 'string')) {
    throw invalidParameter('stop', 'stop must be a string or an array of strings');
  }
  if (stop.length > MAX_STOP_SEQUENCES) {
    throw invalidParameter('stop', `stop takes at most ${MAX_STOP_SEQUENCES} sequences`);
  }
}

function checkMessages(body: JsonObject): void {
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) {
    throw invalidParameter('messages', 'messages must be a non-empty array');
  }
  messages.forEach((m: unknown, i) => {
    const where = `messages[${i}]`;
    if (m === null || typeof m !== 'object' || Array.isArray(m)) {
      throw invalidParameter(where, `${where} must be an object`);
    }
    const { role, content } = m as JsonObject;
    if (typeof role !== 'string' || !CHAT_ROLES.has(role)) {
      throw invalidParameter(`${where}.role`, `${where}.role must be one of ${[...CHAT_ROLES].join(', ')}`);
    }
    const mayOmitContent = role === 'assistant' && (m as JsonObject).tool_calls !== undefined;
    if (content === undefined || content === null) {
      if (!mayOmitContent) throw invalidParameter(`${where}.content`, `${where}.content is required`);
      return;
    }
    if (typeof content === 'string') return;
    if (
      !Array.isArray(content) ||
      content.some((p) => p === null || typeof p !== 'object' || !('type' in p))
    ) {
      throw invalidParameter(
        `${where}.content`,
        `${where}.content must be a string or an array of content parts`,
      );
    }
  });
}

/** POST /v1/chat/completions (spec 4.9). Unknown fields pass through to OpenAI-compatible upstreams. */
export function validateChat(raw: unknown): JsonObject {
  const body = requireObject(raw);
  requireModel(body);
  checkMessages(body);
  checkBoolean(body, 'stream');
  checkStreamOptions(body);
  checkNumber(body, 'temperature', 0, 2);
  checkNumber(body, 'top_p', 0, 1);
  checkNumber(body, 'frequency_penalty', -2, 2);
  checkNumber(body, 'presence_penalty', -2, 2);
  checkPositiveInt(body, 'max_tokens');
  checkPositiveInt(body, 'max_completion_tokens');
  checkPositiveInt(body, 'n', 128);
  checkStop(body);
  return body;
}

/** POST /v1/embeddings (spec 4.11). */
export function validateEmbeddings(raw: unknown): JsonObject {
  const body = requireObject(raw);
  requireModel(body);
  const input = body.input;
  const isTokens = (v: unknown) => Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t));
  const ok =
    (typeof input === 'string' && input.length > 0) ||
    (Array.isArray(input) &&
      input.length > 0 &&
      (input.every((s) => typeof s === 'string' && s.length > 0) ||
        isTokens(input) ||
        input.every(isTokens)));
  if (!ok) {
    throw invalidParameter(
      'input',
      'input must be a non-empty string, an array of non-empty strings, or token arrays',
    );
  }
  const format = body.encoding_format;
  if (format !== undefined && format !== 'float' && format !== 'base64') {
    throw invalidParameter('encoding_format', 'encoding_format must be float or base64');
  }
  checkPositiveInt(body, 'dimensions');
  return body;
}

/** Fills the model's request defaults (e.g. temperature 0.7) where the client left a field out. */
export function applyDefaults(body: JsonObject, defaults: Record<string, unknown>): JsonObject {
  let out = body;
  for (const key in defaults) {
    if (body[key] !== undefined) continue;
    // max_completion_tokens is the newer spelling of max_tokens: never send both.
    if (key === 'max_tokens' && body.max_completion_tokens !== undefined) continue;
    if (out === body) out = { ...body };
    out[key] = defaults[key];
  }
  return out;
}
