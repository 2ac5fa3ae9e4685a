import type { CallContext, JsonObject } from '../../providers/types.js';
import type { ModelEntry } from '../config/types.js';
import { GantryError, invalidParameter } from '../errors.js';
import type { ProviderCall } from './dispatch.js';

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

/** The catalogue capability (a free tag, spec 3) of models that take image inputs. */
export const IMAGE_CAPABILITY = 'image-to-text';
const IMAGE_DETAILS = new Set(['auto', 'low', 'high']);
/** A data: URI of an image: `data:image/<subtype>[;param…],`; the payload is not read (it can be megabytes). */
const IMAGE_DATA_URI = /^data:image\/[a-z0-9.+-]+(;[a-z0-9=.+-]+)*,/i;
const HTTP_URL = /^https?:\/\/[^\s/]/i;

/**
 * An `image_url` part's shape: `image_url.url` a data: URI of an image or an http(s) URL (never fetched
 * here), `detail` auto, low or high.
 */
function checkImagePart(part: JsonObject, where: string): void {
  const image = part.image_url;
  if (image === null || typeof image !== 'object' || Array.isArray(image)) {
    throw invalidParameter(`${where}.image_url`, `${where}.image_url must be an object with a url`);
  }
  const { url, detail } = image as JsonObject;
  if (typeof url !== 'string' || !(IMAGE_DATA_URI.test(url) || HTTP_URL.test(url))) {
    throw invalidParameter(
      `${where}.image_url.url`,
      `${where}.image_url.url must be an http(s) URL or a data: URI of an image (data:image/…)`,
    );
  }
  if (detail !== undefined && (typeof detail !== 'string' || !IMAGE_DETAILS.has(detail))) {
    throw invalidParameter(
      `${where}.image_url.detail`,
      `${where}.image_url.detail must be auto, low or high`,
    );
  }
}

/**
 * The content parts of one message: objects with a `type`; image parts well formed. Returns the path of
 * its first image part, if any.
 */
function checkParts(content: unknown[], where: string): string | undefined {
  let firstImage: string | undefined;
  for (let j = 0; j < content.length; j++) {
    const p = content[j];
    if (p === null || typeof p !== 'object' || !('type' in p)) {
      throw invalidParameter(
        `${where}.content`,
        `${where}.content must be a string or an array of content parts`,
      );
    }
    if ((p as JsonObject).type !== 'image_url') continue;
    const path = `${where}.content[${j}]`;
    checkImagePart(p as JsonObject, path);
    firstImage ??= path;
  }
  return firstImage;
}

/** Checks `messages`; returns the path of the first image part, e.g. `messages[1].content[0]`. */
function checkMessages(body: JsonObject): string | undefined {
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) {
    throw invalidParameter('messages', 'messages must be a non-empty array');
  }
  let firstImage: string | undefined;
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
    if (!Array.isArray(content)) {
      throw invalidParameter(
        `${where}.content`,
        `${where}.content must be a string or an array of content parts`,
      );
    }
    const image = checkParts(content, where);
    firstImage ??= image;
  });
  return firstImage;
}

/** Whether the model takes image inputs: its catalogue capabilities include IMAGE_CAPABILITY. */
export function takesImages(entry: ModelEntry): boolean {
  return entry.capabilities?.includes(IMAGE_CAPABILITY) === true;
}

function imagesNotSupported(model: ModelEntry, path: string): GantryError {
  return invalidParameter(
    path,
    `${path} is an image, and model ${model.namespace} does not take images ` +
      `(its capabilities do not include ${IMAGE_CAPABILITY})`,
  );
}

/**
 * For chat messages built elsewhere (the Responses bridge turns `input_image` into `image_url` parts):
 * image parts must be well formed (400 INVALID_PARAMETER), and the model must take images (400
 * INVALID_PARAMETER naming the first image's path, e.g. `messages[1].content[0]`).
 */
export function rejectImagesUnlessCapable(model: ModelEntry, messages: unknown): void {
  if (!Array.isArray(messages)) return;
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (m === null || typeof m !== 'object') continue;
    const content = (m as JsonObject).content;
    if (!Array.isArray(content)) continue;
    const image = checkParts(content, `messages[${i}]`);
    if (image !== undefined && !takesImages(model)) throw imagesNotSupported(model, image);
  }
}

export interface ValidatedChat {
  body: JsonObject;
  /** The path of the first `image_url` part (messages[i].content[j]), found while validating. */
  firstImage: string | undefined;
}

/** POST /v1/chat/completions (spec 4.9). Unknown fields pass through to OpenAI-compatible upstreams. */
export function validateChat(raw: unknown): JsonObject {
  return validateChatRequest(raw).body;
}

/** validateChat, plus where the first image part is (checked against the model once it is resolved). */
export function validateChatRequest(raw: unknown): ValidatedChat {
  const body = requireObject(raw);
  requireModel(body);
  const firstImage = checkMessages(body);
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
  return { body, firstImage };
}

/** 400 when the chat request holds an image (its first at `firstImage`) and the model takes none. */
export function requireImageCapability(model: ModelEntry, firstImage: string | undefined): void {
  if (firstImage !== undefined && !takesImages(model)) throw imagesNotSupported(model, firstImage);
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

/**
 * Provider kinds whose API requires an output limit: Anthropic's Messages API refuses a request without
 * max_tokens. OpenAI-compatible upstreams and the local models do not need one and pick their own
 * default; filling one there would change what they answer, so they get the body as it is.
 */
const KINDS_NEEDING_OUTPUT_LIMIT = new Set(['anthropic']);

/**
 * `call` with an output limit filled in for providers that need one, where the request (after the
 * model's `defaults`, which apply to every provider) still sets neither max_tokens nor
 * max_completion_tokens: `limit`, the configured limits.default_max_output_tokens (also what the limiter
 * reserves for such a call, ticket.ts maxOutputTokens).
 */
export function fillOutputLimit(call: ProviderCall, limit: number): ProviderCall {
  return (provider, body, ctx) => {
    if (
      !KINDS_NEEDING_OUTPUT_LIMIT.has(provider.kind) ||
      isSet(body.max_tokens) ||
      isSet(body.max_completion_tokens)
    ) {
      return call(provider, body, ctx);
    }
    // A changed body: the client's own JSON text (bodyText) no longer describes it.
    const changed: CallContext = {
      get signal() {
        return ctx.signal;
      },
      requestId: ctx.requestId,
      ...(ctx.cancel === undefined ? {} : { cancel: ctx.cancel }),
    };
    return call(provider, { ...body, max_tokens: limit }, changed);
  };
}

function isSet(value: unknown): boolean {
  return value !== undefined && value !== null;
}
