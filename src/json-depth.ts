import { GantryError } from './errors.js';

/**
 * How deep a request body's JSON may nest. Recursive code overflows the stack on deep values (V8's
 * JSON.stringify near 4,000 levels, the prediction input validator earlier): a 500 instead of an
 * answer. 128 is the cap of serde_json and of llama.cpp's server, so nothing an upstream would take is
 * refused, and far above real bodies (a tool's JSON Schema nests a few dozen levels at most).
 */
export const MAX_JSON_DEPTH = 128;

/**
 * 400 INVALID_PARAMETER naming the field whose value nests deeper than MAX_JSON_DEPTH, or undefined.
 * Visits objects and arrays only (strings and numbers cost nothing), at most MAX_JSON_DEPTH deep.
 */
export function checkJsonDepth(body: unknown): GantryError | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const path = tooDeep(body, MAX_JSON_DEPTH - 1);
  if (path === null) return undefined;
  const param = path.length === 0 ? 'body' : formatPath(path);
  return new GantryError('INVALID_PARAMETER', {
    param,
    message: `${param} nests JSON deeper than ${MAX_JSON_DEPTH} levels`,
    details: param,
  });
}

/** The path to a container nested more than `left` levels below `value`, or null. */
function tooDeep(value: object, left: number): Array<string | number> | null {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i];
      if (typeof item !== 'object' || item === null) continue;
      if (left === 0) return [i];
      const path = tooDeep(item, left - 1);
      if (path !== null) {
        path.unshift(i);
        return path;
      }
    }
    return null;
  }
  const record = value as Record<string, unknown>;
  for (const key in record) {
    const item = record[key];
    if (typeof item !== 'object' || item === null) continue;
    if (left === 0) return [key];
    const path = tooDeep(item, left - 1);
    if (path !== null) {
      path.unshift(key);
      return path;
    }
  }
  return null;
}

/** `input.prompt[0][0]…`: the field and the first levels below it, enough to find it. */
function formatPath(path: Array<string | number>): string {
  let text = '';
  for (const [i, segment] of path.slice(0, 4).entries()) {
    if (typeof segment === 'number') text += `[${segment}]`;
    else text += i === 0 ? segment : `.${segment}`;
  }
  return path.length > 4 ? `${text}…` : text;
}
