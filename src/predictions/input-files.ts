/**
 * File inputs (`format: uri`, what a Cog `Path`/`File` input publishes), checked when the prediction is
 * created (README.md, Predictions, "File inputs"):
 * - a data: URI is passed to the backend as it is (Cog decodes data: URIs itself), if its decoded size is
 *   within `predictions.max_input_file_bytes`;
 * - an http(s) URL is refused at once if its written host is a loopback, private, link-local or otherwise
 *   internal one (the webhooks' SSRF rules, src/webhooks/ssrf.ts), a fast 400 for the obvious cases.
 *   Only the written host is checked here (no DNS at create time); the run fetches the URL itself behind
 *   the full guard and size limit (input-fetch.ts). `predictions.webhooks.allow_private` lifts the
 *   check, as it does for webhooks.
 */

import { isJsonObject } from '../../providers/predictions/cog-openapi.js';
import type { JsonObject } from '../../providers/predictions/types.js';
import { forbiddenAddressReason, forbiddenHostnameReason } from '../webhooks/ssrf.js';
import type { FieldError } from './input-schema.js';

export interface FileInputPolicy {
  maxBytes: number;
  allowPrivate: boolean;
}

/**
 * Top-level inputs that hold files: `format: uri` themselves or as array items, in whatever wrapper the
 * schema puts them: pydantic v2 and the Rust server write `Optional[Path]` and `Optional[list[Path]]` as
 * `anyOf: [{...}, {type: null}]`, and `allOf`/`oneOf` (or the dialect's `if`/`then` for a nullable
 * input) may nest. Missing one would let its values past the size limit and the SSRF check.
 */
export function fileFields(properties: JsonObject): string[] {
  return Object.keys(properties).filter((name) => holdsFiles(properties[name]));
}

function holdsFiles(schema: unknown): boolean {
  const isFile = (s: unknown) => shapes(s).some((shape) => shape.format === 'uri');
  // An array's files: `items` (one schema or a tuple's list) and `prefixItems`.
  return shapes(schema).some((s) => isFile(s) || [s.items, s.prefixItems].flat().some(isFile));
}

/** The schema and every member of its allOf/anyOf/oneOf (and a dialect `then`), at any depth. */
function shapes(schema: unknown): JsonObject[] {
  if (!isJsonObject(schema)) return [];
  const out = [schema];
  for (const keyword of ['allOf', 'anyOf', 'oneOf'] as const) {
    const members = schema[keyword];
    if (Array.isArray(members)) for (const member of members) out.push(...shapes(member));
  }
  out.push(...shapes(schema.then));
  return out;
}

/** One error per file input that breaks the policy; values are never echoed (they may be large). */
export function checkFileInputs(
  input: JsonObject,
  fields: readonly string[],
  policy: FileInputPolicy,
): FieldError[] {
  const errors: FieldError[] = [];
  for (const { field, value } of fileInputValues(input, fields)) {
    const problem = fileProblem(value, policy);
    if (problem) errors.push({ field, message: problem });
  }
  return errors;
}

export interface FileInputValue {
  /** How errors name it: `image`, or `images[1]` for an array item. */
  field: string;
  name: string;
  /** Its place in the array input `name`, if it is an item. */
  index?: number;
  value: string;
}

/** Every string held by a file input, array items included, in input order. */
export function fileInputValues(input: JsonObject, fields: readonly string[]): FileInputValue[] {
  const found: FileInputValue[] = [];
  for (const name of fields) {
    const value = input[name];
    if (typeof value === 'string') found.push({ field: name, name, value });
    if (!Array.isArray(value)) continue;
    value.forEach((item, index) => {
      if (typeof item === 'string') found.push({ field: `${name}[${index}]`, name, index, value: item });
    });
  }
  return found;
}

function fileProblem(value: string, policy: FileInputPolicy): string | null {
  if (/^data:/i.test(value)) {
    const size = dataUriSize(value);
    return size > policy.maxBytes
      ? `is a file of ${size} bytes, more than the ${policy.maxBytes} allowed`
      : null;
  }
  if (policy.allowPrivate) return null;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null; // the schema check reports it
  }
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const reason =
    forbiddenAddressReason(host) === 'not an IP address'
      ? forbiddenHostnameReason(host)
      : forbiddenAddressReason(host);
  return reason === null ? null : `must be a public http(s) URL (${url.hostname} is a ${reason})`;
}

/**
 * Decoded bytes of a data: URI, without decoding it. Percent-encoded text counts each `%XX` as one byte
 * and every other character as its UTF-8 bytes; a malformed escape counts as written (Python's unquote,
 * which Cog uses, leaves it as it is), so no input can make the count throw.
 */
export function dataUriSize(uri: string): number {
  const comma = uri.indexOf(',');
  const payload = comma < 0 ? '' : uri.slice(comma + 1);
  if (!/;base64$/i.test(uri.slice(0, comma))) {
    return Buffer.byteLength(payload.replace(/%[0-9A-Fa-f]{2}/g, '_'), 'utf8');
  }
  const padding = payload.endsWith('==') ? 2 : payload.endsWith('=') ? 1 : 0;
  return Math.floor((payload.length * 3) / 4) - padding;
}
