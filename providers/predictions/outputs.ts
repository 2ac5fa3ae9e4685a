/**
 * A Cog-style output (what a Cog server or Replicate returns) kept in the shape the model produced:
 * numbers stay numbers, objects stay objects, lists stay lists. Files anywhere in it (data: URIs and
 * URLs where the output schema allows, see shapeOutput) are taken out for Gantry to store; their places are
 * recorded so a signed link of the stored copy can go back there (README "Prediction outputs").
 *
 * A list of text pieces becomes one text only when the schema says so: Cog publishes a
 * `ConcatenateIterator` output (a language model's token stream) as
 * `{type: array, items: {type: string}, x-cog-array-type: iterator, x-cog-array-display: concatenate}`.
 */
import { dataUriFile, isHttpUrl, isObject } from './common.js';
import {
  BackendError,
  type FileOutput,
  type JsonObject,
  type OutputPath,
  type ShapedOutput,
} from './types.js';

/** Whether the output schema is Cog's concatenated text iterator (the four fields Cog publishes for it). */
export function isConcatenatedText(schema: JsonObject | undefined): boolean {
  return (
    schema !== undefined &&
    schema.type === 'array' &&
    isObject(schema.items) &&
    schema.items.type === 'string' &&
    schema['x-cog-array-type'] === 'iterator' &&
    schema['x-cog-array-display'] === 'concatenate'
  );
}

export interface ShapeOptions {
  /** The file a URL output stands for (a backend may attach its credentials); by default the bare URL. */
  urlFile?: (url: string) => FileOutput;
  /** Applied to every string left in the output (a backend scrubbing a caller's key). */
  text?: (value: string) => string;
  /**
   * Whether a URL is on the backend's own origin (the Cog server's base URL, the partner's API and file
   * delivery hosts): such a URL is a file even where the schema says nothing, and it alone may be
   * downloaded from a private address (the provider's `allow_private_outputs`).
   */
  ownUrl?: (url: URL) => boolean;
}

/** Deepest nesting of lists and objects an output may have (as request bodies): deeper fails the run. */
export const MAX_OUTPUT_DEPTH = 128;
/** Most files one output may hold: more fails the run rather than downloading and storing them all. */
export const MAX_OUTPUT_FILES = 100;

/**
 * The output with its files taken out (their places hold null) and listed in order (README "Prediction
 * outputs", what counts as a file). A string is a file where the schema says `format: uri` for its place
 * (a data: URI or an http(s) URL); where the schema says nothing, a data: URI is a file and so is a URL
 * on the backend's own origin (`ownUrl`). Anything else stays text: a URL the model echoed (from the
 * caller's input, say) is the caller's data, not something Gantry fetches, and a `type: string` place is
 * text whatever it starts with, as is a malformed data: URI.
 *
 * Keys are kept as data: an output key `__proto__` is an ordinary own property of the result, never the
 * prototype. Deeper than MAX_OUTPUT_DEPTH or more than MAX_OUTPUT_FILES files is a BackendError.
 */
export function shapeOutput(
  output: unknown,
  schema: JsonObject | undefined,
  options: ShapeOptions = {},
): ShapedOutput {
  const text = options.text ?? ((value: string) => value);
  if (isConcatenatedText(schema) && Array.isArray(output) && output.every((p) => typeof p === 'string')) {
    return { value: text(output.join('')), files: [], text: true };
  }
  const files: ShapedOutput['files'] = [];
  const urlFile = options.urlFile ?? ((url: string): FileOutput => ({ kind: 'url', url }));
  const ownUrl = options.ownUrl ?? (() => false);

  const fileOf = (value: string, kind: StringKind): FileOutput | undefined => {
    if (kind === 'text') return undefined;
    if (value.startsWith('data:')) return isDataUri(value) ? dataUriFile(value, files.length) : undefined;
    if (!isHttpUrl(value)) return undefined;
    const own = ownUrl(new URL(value));
    if (kind !== 'uri' && !own) return undefined;
    const file = urlFile(value);
    return own && file.kind === 'url' ? { ...file, ownOrigin: true } : file;
  };

  const walk = (value: unknown, at: JsonObject | undefined, path: OutputPath): unknown => {
    if (typeof value === 'string') {
      const file = fileOf(value, stringKind(at));
      if (!file) return text(value);
      if (files.length === MAX_OUTPUT_FILES) {
        throw new BackendError(`the output holds more than ${MAX_OUTPUT_FILES} files`, { retryable: false });
      }
      files.push({ path, file });
      return null;
    }
    if (value === null || typeof value !== 'object') return value;
    if (path.length === MAX_OUTPUT_DEPTH) {
      throw new BackendError(`the output nests deeper than ${MAX_OUTPUT_DEPTH} levels`, { retryable: false });
    }
    if (Array.isArray(value)) return value.map((item, i) => walk(item, schemaAt(at, i), [...path, i]));
    const out: JsonObject = {};
    for (const [key, item] of Object.entries(value)) {
      // defineProperty, not `out[key] =`: a `__proto__` key must stay a key, not set the prototype.
      Object.defineProperty(out, key, {
        value: walk(item, schemaAt(at, key), [...path, key]),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  };
  return { value: walk(output ?? null, schema, []), files };
}

/** The schema itself and the members of its allOf/anyOf/oneOf, recursively. */
function alternatives(schema: JsonObject): JsonObject[] {
  const out = [schema];
  for (const keyword of ['allOf', 'anyOf', 'oneOf'] as const) {
    const members = schema[keyword];
    if (Array.isArray(members)) for (const m of members) if (isObject(m)) out.push(...alternatives(m));
  }
  return out;
}

/** The schema of a list item or object property, where the schema gives one. */
function schemaAt(schema: JsonObject | undefined, key: string | number): JsonObject | undefined {
  if (!schema) return undefined;
  for (const s of alternatives(schema)) {
    if (typeof key === 'number') {
      const prefix = s.prefixItems;
      if (Array.isArray(prefix) && isObject(prefix[key])) return prefix[key];
      if (Array.isArray(s.items) && isObject(s.items[key])) return s.items[key];
      if (isObject(s.items)) return s.items;
    } else {
      const properties = s.properties;
      if (isObject(properties) && isObject(properties[key])) return properties[key];
      if (isObject(s.additionalProperties)) return s.additionalProperties;
    }
  }
  return undefined;
}

/** RFC 2397's header: `data:[type/subtype][;attribute=value]*[;base64],`. */
const DATA_URI_HEADER = /^data:(?:[\w!#$&^.+-]+\/[\w!#$&^.+-]+)?(?:;[\w!#$&^.+-]+=[^;,\s]*)*(;base64)?,/i;
const BASE64 = /^[A-Za-z0-9+/\-_\s]*(?:=\s*){0,2}$/;

/**
 * A well-formed data: URI: text that merely starts with "data:" (`data: loss 0.25`) is not one. The
 * payload must be base64 where the header says so.
 */
function isDataUri(value: string): boolean {
  const header = DATA_URI_HEADER.exec(value);
  if (!header) return false;
  return header[1] === undefined || BASE64.test(value.slice(header[0].length));
}

type StringKind = 'uri' | 'text' | 'unknown';

/** What the schema says a string in its place is: a URI (a file), plain text, or nothing. */
function stringKind(schema: JsonObject | undefined): StringKind {
  if (!schema) return 'unknown';
  const all = alternatives(schema);
  if (all.some((s) => s.format === 'uri')) return 'uri';
  const isString = (s: JsonObject) =>
    s.type === 'string' || (Array.isArray(s.type) && s.type.includes('string'));
  return all.some(isString) ? 'text' : 'unknown';
}

/**
 * The new pieces of a growing output (a list that gains items while the model works), for stream callers:
 * only a concatenated text output streams, so its pieces add up to the final output; any other output
 * reaches the stream once, whole, when Gantry has stored it.
 */
export class OutputPieces {
  private seen = 0;
  private readonly active: boolean;

  constructor(stream: boolean, schema: JsonObject | undefined) {
    this.active = stream && isConcatenatedText(schema);
  }

  fresh(output: unknown): string[] {
    if (!this.active || !Array.isArray(output) || output.length <= this.seen) return [];
    const pieces = output.slice(this.seen).filter((p): p is string => typeof p === 'string');
    this.seen = output.length;
    return pieces;
  }
}
