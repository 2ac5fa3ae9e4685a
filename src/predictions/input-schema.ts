/**
 * Checks a prediction's `input` against its model's input_schema (spec 2.2, 4.3) and knows which inputs
 * are secrets (a partner's `<partner>_api_key`, Cog `Secret`s) so they can be redacted and sealed.
 *
 * Schemas are Cog's (OpenAPI 3.0 flavoured JSON Schema) or hand-written in the catalog. Each is compiled
 * once at start (`compileInputSchema`); `validate` then runs per request. It returns data, never a
 * GantryError: the route turns `fields` into INVALID_INPUT with `formatFieldErrors`.
 *
 * Choices made here:
 * - Dialect: ajv's draft-07 class. OpenAPI 3.0 schemas are closest to draft-04/07 (tuple `items` arrays
 *   stay legal); OpenAPI-only and old-Cog spellings are rewritten and harmless faults repaired first
 *   (input-dialect.ts).
 * - Unknown input fields are rejected (`foo: is not an input of this model`), where Python Cog silently
 *   drops them: a misspelt `num_output` would otherwise run a paid prediction with the default. A model's
 *   `unknown_inputs: drop` drops them instead. Only schemas that list `properties` and say nothing about
 *   `additionalProperties` get this; an empty catalog schema (`{}`) accepts any object.
 * - Values are converted as pydantic converts them (`"4"` for an integer is 4; input-coercion.ts) and the
 *   converted value is what is stored and sent.
 * - Defaults are never checked against their own schema (Cog does not): a top-level default that passes
 *   its schema is filled in (so `Prediction.input` shows it); one that does not (`default: null` on a
 *   non-nullable input, a file name on a `format: uri` input, 7.5 on an integer) is left out, and the
 *   backend applies its own default. A client that sends exactly such a default gets it passed on
 *   unchecked and unconverted, as sent (except a default outside the input's `enum`).
 * - Formats: `uri` accepts http(s) URLs and data: URIs (what a backend can fetch or decode); `password`
 *   accepts any string; formats Gantry does not know are not checked.
 */

import { isDeepStrictEqual } from 'node:util';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { isJsonObject, mapSubschemas } from '../../providers/predictions/cog-openapi.js';
import type { JsonObject } from '../../providers/predictions/types.js';
import { coerceInput, fieldReadings } from './input-coercion.js';
import { toAjvDialect } from './input-dialect.js';
import { fileFields } from './input-files.js';

/** What a secret input's value is replaced with wherever a prediction is shown, logged or stored. */
export const REDACTED = '**********';

/** Create-body options the spec also shows at the top level (spec 4.3) that belong in `input`. */
export const TOP_LEVEL_INPUT_OPTIONS = ['width', 'height', 'num_outputs', 'strength'] as const;

/** Cog's annotations; registered so they are known keywords, not validated. */
const COG_ANNOTATIONS = [
  'x-order',
  'x-cog-secret',
  'x-cog-array-type',
  'x-cog-array-display',
  'x-cog-accept',
];

export interface FieldError {
  /** The input field at fault: `prompt`, `image_input[0]`, or `input` for the whole object. */
  field: string;
  message: string;
}

export type InputValidation =
  /** `dropped`: unknown inputs removed under `unknown_inputs: drop`. */
  { ok: true; input: JsonObject; dropped: string[] } | { ok: false; fields: FieldError[] };

export interface InputValidator {
  /** The top-level inputs the schema declares, in `x-order`. */
  readonly fieldNames: readonly string[];
  /** Inputs that hold secrets: `format: password`, `x-cog-secret: true`, or named `*_api_key`. */
  readonly secretFields: readonly string[];
  /** Inputs that hold files (`format: uri`, or arrays of them): see input-files.ts. */
  readonly fileFields: readonly string[];
  /**
   * Never mutates `input`; on success returns a copy converted as pydantic would, with the schema's
   * usable defaults filled in.
   */
  validate(input: unknown): InputValidation;
}

export interface CompileOptions {
  /** `drop`: inputs the schema does not declare are removed (and listed) instead of refused. */
  unknownInputs?: 'refuse' | 'drop';
  /** Receives a note per repair made to the schema (input-dialect.ts), for the start-up log. */
  repairs?: string[];
  /**
   * Whose lax conversions apply (input-coercion.ts): by default pydantic v2's, the narrower; a schema a
   * Cog server published gets its own (input-dialect.ts `pydanticGeneration`, src/predictions/setup.ts).
   */
  pydantic?: 'v1' | 'v2';
}

/** Compiles a model's input schema. Throws an Error when the schema itself is not valid JSON Schema. */
export function compileInputSchema(schema: JsonObject, options: CompileOptions = {}): InputValidator {
  const dialect = toAjvDialect(schema, options.repairs ?? []);
  const prepared = closeTopLevel(dialect);
  const ajv = new Ajv({
    strict: false,
    allErrors: true,
    useDefaults: false,
    coerceTypes: false,
    // `data` on each error lets a type error say what it got ("not a string").
    verbose: true,
  });
  ajv.addVocabulary(COG_ANNOTATIONS);
  ajv.addFormat('uri', { type: 'string', validate: isFetchableUri });
  ajv.addFormat('password', { type: 'string', validate: () => true });
  for (const format of formatsUsed(prepared)) {
    // ajv would warn on every unknown format; not checking it is the intended behaviour.
    if (!ajv.formats[format]) ajv.addFormat(format, true);
  }

  let check: ValidateFunction;
  try {
    check = ajv.compile(prepared);
  } catch (err) {
    throw new Error(`input schema does not compile: ${(err as Error).message}`, { cause: err });
  }

  const properties = isJsonObject(schema.properties) ? schema.properties : {};
  const prepProperties = isJsonObject(dialect.properties) ? dialect.properties : {};
  const required = Array.isArray(dialect.required) ? dialect.required.filter(isString) : [];
  const pydantic = options.pydantic ?? 'v2';
  const readings = fieldReadings(prepProperties, required, pydantic);
  const defaults = usableDefaults(ajv, prepProperties);
  // Defaults that break their own schema: a client sending exactly one gets it through unchecked. Not a
  // null one (null already means "left out" for such an input, input-coercion.ts), nor one outside the
  // input's choices (Cog checks a sent value against its choices whoever wrote it).
  const ownDefaults = Object.entries(prepProperties).flatMap(([name, property]) =>
    isJsonObject(property) && property.default != null && !defaults.has(name) && !('enum' in property)
      ? [[name, property.default] as const]
      : [],
  );
  const drop = options.unknownInputs === 'drop' && prepared.additionalProperties === false;
  return {
    fieldNames: orderedFieldNames(properties),
    secretFields: Object.keys(properties).filter((name) => isSecretProperty(name, properties[name])),
    fileFields: fileFields(prepProperties),
    validate(input: unknown): InputValidation {
      if (!isJsonObject(input))
        return { ok: false, fields: [{ field: 'input', message: 'must be an object' }] };
      // A new top-level object (nested values are shared, and nothing here writes into them): the
      // caller's object stays as it was sent; what is checked and stored is the converted copy.
      // The author's own default, sent as it is written, is passed on as sent: Cog never checks its
      // defaults, so neither the check nor a conversion may turn it into something else.
      const asDefault = ownDefaults.filter(
        ([name, value]) => Object.hasOwn(input, name) && isDeepStrictEqual(input[name], value),
      );
      const rest = asDefault.length === 0 ? input : { ...input };
      for (const [name] of asDefault) delete rest[name];
      const { input: copy } = coerceInput(rest, readings, pydantic);
      const dropped: string[] = [];
      if (drop) {
        for (const name of Object.keys(copy)) {
          if (Object.hasOwn(prepProperties, name)) continue;
          dropped.push(name);
          delete copy[name];
        }
      }
      if (!check(copy)) return { ok: false, fields: toFieldErrors(check.errors ?? []) };
      for (const [name, value] of asDefault) copy[name] = structuredClone(value);
      for (const [name, value] of defaults) if (!(name in copy)) copy[name] = structuredClone(value);
      return { ok: true, input: orderedAs(input, copy), dropped };
    },
  };
}

/** Top-level defaults that pass their own property's schema; the others are left to the backend. */
function usableDefaults(ajv: Ajv, properties: JsonObject): Map<string, unknown> {
  const usable = new Map<string, unknown>();
  for (const [name, property] of Object.entries(properties)) {
    if (!isJsonObject(property) || !('default' in property) || property.default === undefined) continue;
    let fits = false;
    try {
      fits = ajv.validate(property, property.default) === true;
    } catch {
      fits = false;
    }
    if (fits) usable.set(name, property.default);
  }
  return usable;
}

/** `out` with the keys the client sent first, in its order (a default passed unchecked keeps its place). */
function orderedAs(sent: JsonObject, out: JsonObject): JsonObject {
  const ordered: JsonObject = {};
  for (const name of Object.keys(sent)) if (Object.hasOwn(out, name)) ordered[name] = out[name];
  for (const [name, value] of Object.entries(out)) if (!Object.hasOwn(ordered, name)) ordered[name] = value;
  return ordered;
}

function isString(value: unknown): value is string {
  return typeof value === 'string';
}

/** `prompt: is required; num_outputs: must be <= 4`: the message of the INVALID_INPUT error. */
export function formatFieldErrors(fields: readonly FieldError[]): string {
  return fields.map((f) => `${f.field}: ${f.message}`).join('; ');
}

/** A copy of `input` with every present secret replaced by REDACTED, for the Prediction object and logs. */
export function redactInput(input: JsonObject, secretFields: readonly string[]): JsonObject {
  const copy: JsonObject = { ...input };
  for (const field of secretFields) {
    if (copy[field] !== undefined && copy[field] !== null) copy[field] = REDACTED;
  }
  return copy;
}

/**
 * Folds the create body's top-level `width`, `height`, `num_outputs` and `strength` (spec 4.3) into
 * `input`. A value already in `input` wins: it is the model-specific place, the top level the generic
 * one. With `acceptedFields` (the validator's `fieldNames`), options the model does not declare are
 * left out rather than merged and then rejected as unknown inputs, since the client sent them as
 * generic options, not to this model. Returns a new object.
 */
export function mergeTopLevelOptions(
  body: JsonObject,
  input: JsonObject,
  acceptedFields?: readonly string[],
): JsonObject {
  const merged: JsonObject = { ...input };
  for (const option of TOP_LEVEL_INPUT_OPTIONS) {
    const value = body[option];
    if (value === undefined || value === null || option in merged) continue;
    if (acceptedFields && !acceptedFields.includes(option)) continue;
    merged[option] = value;
  }
  return merged;
}

/** Output pattern (spec 2.2): a single URL string (`type: string`) rather than an array of them. */
export function outputIsSingleUrl(outputSchema: JsonObject | undefined): boolean {
  return outputSchema?.type === 'string';
}

function isSecretProperty(name: string, property: unknown): boolean {
  if (/(^|_)api_key$/i.test(name)) return true;
  if (!isJsonObject(property)) return false;
  // A secret may hide behind an unfolded `allOf` wrapper; look at its members too.
  const parts = [property, ...(Array.isArray(property.allOf) ? property.allOf.filter(isJsonObject) : [])];
  return parts.some((part) => part.format === 'password' || part['x-cog-secret'] === true);
}

function orderedFieldNames(properties: JsonObject): string[] {
  const order = (name: string): number => {
    const property = properties[name];
    const value = isJsonObject(property) ? property['x-order'] : undefined;
    return typeof value === 'number' ? value : Number.POSITIVE_INFINITY;
  };
  // Array.prototype.sort is stable, so fields without x-order keep declaration order.
  return Object.keys(properties).sort((a, b) => order(a) - order(b));
}

function isFetchableUri(value: string): boolean {
  if (/^data:[^,]*,/i.test(value)) return true;
  try {
    const url = new URL(value);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
  } catch {
    return false;
  }
}

/** Rejects unknown top-level inputs (see the choice above) by closing the root object. */
function closeTopLevel(schema: JsonObject): JsonObject {
  const open = 'additionalProperties' in schema || 'patternProperties' in schema;
  if (!isJsonObject(schema.properties) || open) return schema;
  return { ...schema, additionalProperties: false };
}

function formatsUsed(schema: JsonObject, found = new Set<string>()): Set<string> {
  if (typeof schema.format === 'string') found.add(schema.format);
  mapSubschemas(schema, (sub) => {
    formatsUsed(sub, found);
    return sub;
  });
  return found;
}

/** One readable error per field, in the order ajv found them. */
function toFieldErrors(errors: readonly ErrorObject[]): FieldError[] {
  const byField = new Map<string, string>();
  for (const error of errors) {
    // `if`/`then` only restates the errors reported just before it.
    if (error.keyword === 'if') continue;
    const { field, message } = describeError(error);
    if (!byField.has(field)) byField.set(field, message);
  }
  return [...byField].map(([field, message]) => ({ field, message }));
}

function describeError(error: ErrorObject): FieldError {
  const at = pointerToField(error.instancePath);
  const params = error.params as Record<string, unknown>;
  const child = (name: unknown) => (at ? `${at}.${String(name)}` : String(name));
  switch (error.keyword) {
    case 'required':
      return { field: child(params.missingProperty), message: 'is required' };
    case 'additionalProperties':
      return {
        field: child(params.additionalProperty),
        message: at ? 'is not allowed here' : 'is not an input of this model',
      };
    default:
      return { field: at || 'input', message: describeValueError(error, params) };
  }
}

function describeValueError(error: ErrorObject, params: Record<string, unknown>): string {
  switch (error.keyword) {
    case 'type': {
      const wanted = String(params.type)
        .split(',')
        .filter((t) => t !== 'null')
        .map((t) => TYPE_NAMES[t] ?? t);
      return `must be ${wanted.join(' or ')}, not ${describeValue(error.data)}`;
    }
    case 'enum': {
      const allowed = (params.allowedValues as unknown[]).filter((v) => v !== null);
      return `must be one of ${allowed.map(String).join(', ')}`;
    }
    case 'const':
      return `must be ${String(params.allowedValue)}`;
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum':
      return `must be ${String(params.comparison)} ${String(params.limit)}`;
    case 'minLength':
      return `must be at least ${String(params.limit)} characters long`;
    case 'maxLength':
      return `must be at most ${String(params.limit)} characters long`;
    case 'minItems':
      return `must have at least ${String(params.limit)} items`;
    case 'maxItems':
      return `must have at most ${String(params.limit)} items`;
    case 'pattern':
      return `must match the pattern ${String(params.pattern)}`;
    case 'multipleOf':
      return `must be a multiple of ${String(params.multipleOf)}`;
    case 'uniqueItems':
      return 'must not contain duplicate items';
    case 'format':
      return params.format === 'uri'
        ? 'must be an http(s) URL or a data: URI'
        : `must be a valid ${String(params.format)}`;
    default:
      return error.message ?? 'is invalid';
  }
}

const TYPE_NAMES: Record<string, string> = {
  integer: 'an integer',
  number: 'a number',
  string: 'a string',
  boolean: 'a boolean',
  array: 'an array',
  object: 'an object',
};

/** The kind of a rejected value, never the value itself: it may be a mistyped secret. */
function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'an integer' : 'a fractional number';
  return TYPE_NAMES[typeof value] ?? typeof value;
}

/** `/image_input/0` → `image_input[0]`, `/lora/scale` → `lora.scale`. */
function pointerToField(pointer: string): string {
  if (pointer === '') return '';
  let field = '';
  for (const raw of pointer.slice(1).split('/')) {
    const segment = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    field += /^\d+$/.test(segment) ? `[${segment}]` : field ? `.${segment}` : segment;
  }
  return field;
}
