/**
 * A Cog-style output (what a Cog server or Replicate returns) kept in the shape the model produced:
 * numbers stay numbers, objects stay objects, lists stay lists. Files anywhere in it (data: URIs, and
 * URLs where the output schema says `format: uri`) are taken out for Gantry to store; their places are
 * recorded so a signed link of the stored copy can go back there (README "Prediction outputs").
 *
 * A list of text pieces becomes one text only when the schema says so: Cog publishes a
 * `ConcatenateIterator` output (a language model's token stream) as
 * `{type: array, items: {type: string}, x-cog-array-type: iterator, x-cog-array-display: concatenate}`.
 */
import { dataUriFile, isHttpUrl, isObject } from './shared.js';
import type { FileOutput, JsonObject, OutputPath, ShapedOutput } from './types.js';

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
}

/**
 * The output with its files taken out (their places hold null) and listed in order. A data: URI is
 * always a file. An http(s) URL is a file where the schema says `format: uri` for its place, text where
 * the schema says a plain string, and a file where the schema says nothing (no schema, or no schema for
 * that place): a backend's URL handed to the caller would point into the backend, which the caller
 * cannot reach or which expires.
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

  const walk = (value: unknown, at: JsonObject | undefined, path: OutputPath): unknown => {
    if (typeof value === 'string') {
      const file = value.startsWith('data:')
        ? dataUriFile(value, files.length)
        : isHttpUrl(value) && stringKind(at) !== 'text'
          ? urlFile(value)
          : undefined;
      if (!file) return text(value);
      files.push({ path, file });
      return null;
    }
    if (Array.isArray(value)) return value.map((item, i) => walk(item, schemaAt(at, i), [...path, i]));
    if (isObject(value)) {
      const out: JsonObject = {};
      for (const [key, item] of Object.entries(value))
        out[key] = walk(item, schemaAt(at, key), [...path, key]);
      return out;
    }
    return value;
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

/** What the schema says a string in its place is: a URI (a file), plain text, or nothing. */
function stringKind(schema: JsonObject | undefined): 'uri' | 'text' | 'unknown' {
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
