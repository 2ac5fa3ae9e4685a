/**
 * The conversions Python Cog's input validation (pydantic, lax mode) makes before it checks a value, so
 * that Gantry accepts what a Cog server accepts and passes the converted value on (README.md,
 * Predictions, "How inputs are read"). Which pydantic: for a schema read from a Cog server, the one that
 * wrote it (input-dialect.ts `pydanticGeneration`, setup.ts); v2 otherwise. v1 (Cog <= 0.9's default)
 * converts more than v2.
 * Both:
 * - integer: a string of an integer with optional sign and surrounding spaces (`"1024"`, `" 7 "`), or a
 *   number without a fractional part (`3.0`); never `"3.5"` or `"1e3"`.
 * - number: a string of a decimal number with optional exponent and surrounding spaces (`"7"`, `"0.5"`).
 * - boolean: `true`/`false` spelled `1`/`0`, or the strings `0 off f false n no 1 on t true y yes`
 *   (any case).
 * - `null` for an input that is not required, or whose default is null, is the same as leaving it out,
 *   unless the schema allows null itself.
 * pydantic v1 only (its `int_validator` is Python's `int(v)`, its `str_validator` is `str(v)` for numbers):
 * - integer: a fractional number is truncated toward zero (7.5 → 7, -7.5 → -7); a boolean is 1 or 0.
 * - number: a boolean is 1 or 0.
 * - string (plain text, not a file or other format): a number becomes its text (7 → `"7"`), a boolean
 *   `"True"`/`"False"` as Python writes it. pydantic v2 never makes a string from another type.
 * Only the top-level inputs and the items of array inputs are converted: Cog's inputs are flat.
 */

import { isJsonObject } from '../../providers/predictions/cog-openapi.js';
import type { JsonObject } from '../../providers/predictions/types.js';

type Scalar = 'integer' | 'number' | 'boolean';
/** The pydantic generation whose lax conversions apply. */
export type Pydantic = 'v1' | 'v2';

const INTEGER = /^\s*[+-]?\d+\s*$/;
const DECIMAL = /^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/;
const TRUE_WORDS = new Set(['1', 'on', 't', 'true', 'y', 'yes']);
const FALSE_WORDS = new Set(['0', 'off', 'f', 'false', 'n', 'no']);

/** `value` as a `type`, or undefined when pydantic would refuse it (or it is already one). */
export function coerceScalar(
  type: Scalar,
  value: unknown,
  pydantic: Pydantic = 'v2',
): number | boolean | undefined {
  if (pydantic === 'v1') {
    // int(True) and float(True) in Python; int(7.5) truncates.
    if ((type === 'integer' || type === 'number') && typeof value === 'boolean') return value ? 1 : 0;
    if (type === 'integer' && typeof value === 'number' && Number.isFinite(value) && !Number.isInteger(value))
      return Math.trunc(value);
  }
  switch (type) {
    case 'integer':
      // A JSON `3.0` is already the integer 3 here (and to ajv): only strings need converting.
      if (typeof value === 'string' && INTEGER.test(value)) {
        const n = Number(value.trim());
        return Number.isSafeInteger(n) ? n : undefined;
      }
      return undefined;
    case 'number':
      if (typeof value === 'string' && DECIMAL.test(value)) {
        const n = Number(value.trim());
        return Number.isFinite(n) ? n : undefined;
      }
      return undefined;
    case 'boolean':
      if (value === 1 || value === 0) return value === 1;
      if (typeof value !== 'string') return undefined;
      if (TRUE_WORDS.has(value.toLowerCase())) return true;
      if (FALSE_WORDS.has(value.toLowerCase())) return false;
      return undefined;
  }
}

/** How to read one top-level input, worked out from its schema at start. */
export interface FieldReading {
  /** The scalar type a value is converted to (none when the schema also takes strings or is not one). */
  scalar?: Scalar;
  /** The scalar type of an array input's items. */
  itemScalar?: Scalar;
  /** pydantic v1 only: a plain text input, to which numbers and booleans are converted. */
  text?: boolean;
  /** A null value means "left out". */
  nullIsAbsent: boolean;
}

/** The reading of each top-level property of a (dialect-rewritten) input schema. */
export function fieldReadings(
  properties: JsonObject,
  required: readonly string[],
  pydantic: Pydantic = 'v2',
): Map<string, FieldReading> {
  const readings = new Map<string, FieldReading>();
  for (const [name, property] of Object.entries(properties)) {
    if (!isJsonObject(property)) continue;
    const types = typesOf(property);
    const reading: FieldReading = {
      nullIsAbsent: !types.has('null') && (!required.includes(name) || property.default === null),
    };
    const scalar = scalarOf(types);
    if (scalar) reading.scalar = scalar;
    if (pydantic === 'v1' && isPlainText(property, types)) reading.text = true;
    if (types.has('array') && isJsonObject(property.items)) {
      const item = scalarOf(typesOf(property.items));
      if (item) reading.itemScalar = item;
    }
    readings.set(name, reading);
  }
  return readings;
}

/**
 * A copy of `input` with pydantic's conversions applied (see the header); `converted` names the fields
 * whose value changed or went away.
 */
export function coerceInput(
  input: JsonObject,
  readings: ReadonlyMap<string, FieldReading>,
  pydantic: Pydantic = 'v2',
): { input: JsonObject; converted: string[] } {
  const out: JsonObject = {};
  const converted: string[] = [];
  for (const [name, value] of Object.entries(input)) {
    const reading = readings.get(name);
    if (!reading) {
      out[name] = value;
      continue;
    }
    if (value === null && reading.nullIsAbsent) {
      converted.push(name);
      continue;
    }
    let next = value;
    if (reading.scalar) next = coerceScalar(reading.scalar, value, pydantic) ?? value;
    else if (reading.text) next = pythonText(value) ?? value;
    else if (reading.itemScalar && Array.isArray(value)) {
      const scalar = reading.itemScalar;
      const items = value.map((item) => coerceScalar(scalar, item, pydantic) ?? item);
      if (items.some((item, i) => item !== value[i])) next = items;
    }
    if (next !== value) converted.push(name);
    out[name] = next;
  }
  return { input: out, converted };
}

/** The JSON types a schema admits, looking through `anyOf`/`oneOf` (pydantic v2's Optional[...]). */
function typesOf(schema: JsonObject): Set<string> {
  const found = new Set<string>();
  const type = schema.type;
  if (typeof type === 'string') found.add(type);
  else if (Array.isArray(type)) for (const t of type) if (typeof t === 'string') found.add(t);
  if (schema.nullable === true) found.add('null');
  if (Array.isArray(schema.enum) && schema.enum.includes(null)) found.add('null');
  for (const keyword of ['anyOf', 'oneOf', 'allOf'] as const) {
    const members = schema[keyword];
    if (!Array.isArray(members)) continue;
    for (const member of members) if (isJsonObject(member)) for (const t of typesOf(member)) found.add(t);
  }
  // The dialect rewrite turns a typeless nullable schema into `if not null then …`.
  if (isJsonObject(schema.if) && isJsonObject(schema.then)) {
    found.add('null');
    for (const t of typesOf(schema.then)) found.add(t);
  }
  return found;
}

/** The one scalar type to convert to; none when strings are also allowed (then a string stays one). */
function scalarOf(types: ReadonlySet<string>): Scalar | undefined {
  if (types.has('string')) return undefined;
  if (types.has('number')) return 'number';
  if (types.has('integer')) return 'integer';
  if (types.has('boolean')) return 'boolean';
  return undefined;
}

/** A text input with no format (a file's `format: uri` wants a URL, not a number's text). */
function isPlainText(schema: JsonObject, types: ReadonlySet<string>): boolean {
  if (!types.has('string') || types.has('number') || types.has('integer') || types.has('boolean'))
    return false;
  if (Array.isArray(schema.enum)) return false;
  const hasFormat = (s: unknown): boolean =>
    isJsonObject(s) &&
    (typeof s.format === 'string' ||
      ['anyOf', 'oneOf', 'allOf'].some((k) => Array.isArray(s[k]) && (s[k] as unknown[]).some(hasFormat)));
  return !hasFormat(schema);
}

/** Python's `str(v)` of a JSON number or boolean; undefined for anything else. */
function pythonText(value: unknown): string | undefined {
  if (typeof value === 'boolean') return value ? 'True' : 'False';
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return undefined;
}
