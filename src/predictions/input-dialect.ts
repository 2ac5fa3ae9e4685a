/**
 * Rewrites a model's input schema (Cog's OpenAPI flavour, any Cog version) into the JSON Schema that ajv's
 * draft-07 class compiles, and repairs what Cog itself accepts but a strict JSON Schema compiler refuses.
 * README.md (Predictions, "Input schemas Gantry repairs") lists the repairs for users.
 *
 * - OpenAPI 3.0 spellings: `nullable`, boolean `exclusiveMinimum`/`exclusiveMaximum`.
 * - pydantic's constraint names where an old Cog wrote them as they were given to `Input(...)`: `ge`, `le`,
 *   `gt`, `lt`, `min_length`, `max_length`, `regex`, `multiple_of` (the JSON Schema keyword is used when
 *   both are present).
 * - An `enum` with a repeated item (Python accepts `choices=[1, 1, 2]`): deduplicated.
 * - An integer, number or boolean input whose `enum` lists strings (Cog 0.1 wrote `choices` of ints as
 *   strings): the items are converted to the input's type where they read as one (`"512"` → 512).
 * Each repair is named in `repairs` so start-up can log it.
 *
 * `pydanticGeneration` tells which pydantic wrote a Cog schema, for the conversions (input-coercion.ts).
 */

import { isJsonObject, mapSubschemas } from '../../providers/predictions/cog-openapi.js';
import type { JsonObject } from '../../providers/predictions/types.js';
import { coerceScalar, type Pydantic } from './input-coercion.js';

/** pydantic constraint → JSON Schema keyword. */
const PYDANTIC_KEYWORDS: ReadonlyArray<readonly [string, string]> = [
  ['ge', 'minimum'],
  ['le', 'maximum'],
  ['gt', 'exclusiveMinimum'],
  ['lt', 'exclusiveMaximum'],
  ['min_length', 'minLength'],
  ['max_length', 'maxLength'],
  ['regex', 'pattern'],
  ['multiple_of', 'multipleOf'],
];

const DESCRIPTIVE_KEYWORDS = new Set(['title', 'description', 'default', 'examples', 'deprecated']);

/** Rewrites `schema` at every depth; `at` names the position for the repair notes (`seed`, `lora.scale`). */
export function toAjvDialect(schema: JsonObject, repairs: string[] = [], at = ''): JsonObject {
  const out = mapSubschemasNamed(schema, at, (sub, where) => toAjvDialect(sub, repairs, where));
  // The dialect is ours to choose; a declared one (e.g. 2020-12) would make ajv look for a meta-schema.
  delete out.$schema;
  for (const [pydantic, keyword] of PYDANTIC_KEYWORDS) {
    if (!(pydantic in out)) continue;
    if (!(keyword in out) && isConstraintValue(keyword, out[pydantic])) out[keyword] = out[pydantic];
    delete out[pydantic];
  }
  for (const [bound, exclusive] of [
    ['minimum', 'exclusiveMinimum'],
    ['maximum', 'exclusiveMaximum'],
  ] as const) {
    if (typeof out[exclusive] !== 'boolean') continue;
    if (out[exclusive] === true && typeof out[bound] === 'number') {
      out[exclusive] = out[bound];
      delete out[bound];
    } else {
      delete out[exclusive];
    }
  }
  repairEnum(out, repairs, at);
  if (out.nullable !== true) return out;
  // ajv honours `nullable` next to `type`, but `enum` must list null too, and without `type` ajv refuses
  // the schema: then check the other keywords only when the value is not null.
  if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
  if ('type' in out) return out;
  delete out.nullable;
  const described: JsonObject = {};
  const checks: JsonObject = {};
  for (const [keyword, value] of Object.entries(out)) {
    const descriptive = DESCRIPTIVE_KEYWORDS.has(keyword) || keyword.startsWith('x-');
    (descriptive ? described : checks)[keyword] = value;
  }
  if (Object.keys(checks).length === 0) return described;
  // biome-ignore lint/suspicious/noThenProperty: JSON Schema keyword
  return { ...described, if: { not: { type: 'null' } }, then: checks };
}

function isConstraintValue(keyword: string, value: unknown): boolean {
  return keyword === 'pattern' ? typeof value === 'string' : typeof value === 'number';
}

function repairEnum(schema: JsonObject, repairs: string[], at: string): void {
  let items: unknown[] | undefined = Array.isArray(schema.enum) ? schema.enum : undefined;
  if (!items) return;
  const where = at || 'input';
  const type = schema.type;
  if ((type === 'integer' || type === 'number' || type === 'boolean') && items.some(isString)) {
    items = items.map((item) => (isString(item) ? (coerceScalar(type, item) ?? item) : item));
    schema.enum = items;
    repairs.push(`${where}: enum items converted to ${type}`);
  }
  const seen = new Set<string>();
  const unique = items.filter((item) => {
    const key = JSON.stringify(item);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
  if (unique.length !== items.length) {
    schema.enum = unique;
    repairs.push(`${where}: repeated enum items removed`);
  }
}

function isString(value: unknown): value is string {
  return typeof value === 'string';
}

/** mapSubschemas, telling `fn` the field a property subschema describes (for the repair notes). */
function mapSubschemasNamed(
  schema: JsonObject,
  at: string,
  fn: (sub: JsonObject, at: string) => JsonObject,
): JsonObject {
  const { properties, ...rest } = schema;
  const out = mapSubschemas(rest, (sub) => fn(sub, at));
  if (isJsonObject(properties)) {
    const named: JsonObject = {};
    for (const [name, sub] of Object.entries(properties)) {
      named[name] = isJsonObject(sub) ? fn(sub, at ? `${at}.${name}` : name) : sub;
    }
    out.properties = named;
  } else if (properties !== undefined) {
    out.properties = properties;
  }
  return out;
}

/**
 * Which pydantic's conversions apply to inputs of `schema` (a Cog Input schema, before the rewrite).
 * pydantic v2 (Cog 0.10+ on pydantic 2, and the Rust server) writes an optional input as
 * `anyOf: [{...}, {type: null}]` or `type: [..., "null"]`; pydantic v1 (Cog <= 0.9's default) never
 * lists null (an optional input is just not required, `default: null` at most). A schema with an
 * input that lists null (those shapes, or OpenAPI 3.0's `nullable`, which pydantic v1 never writes) is
 * read as v2; any other as v1, whose conversions are the wider ones.
 */
export function pydanticGeneration(schema: JsonObject): Pydantic {
  const properties = isJsonObject(schema.properties) ? Object.values(schema.properties) : [];
  const isNull = (s: unknown) => isJsonObject(s) && s.type === 'null';
  const v2 = properties.some(
    (p) =>
      isJsonObject(p) &&
      (p.nullable === true ||
        (Array.isArray(p.type) && p.type.includes('null')) ||
        (Array.isArray(p.anyOf) && p.anyOf.some(isNull)) ||
        (Array.isArray(p.oneOf) && p.oneOf.some(isNull))),
  );
  return v2 ? 'v2' : 'v1';
}
