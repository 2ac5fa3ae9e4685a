/**
 * Turns a Cog server's /openapi.json into the two self-contained JSON Schemas Gantry keeps per model
 * (spec 2.2): `components.schemas.Input` and `components.schemas.Output`.
 *
 * Cog points into `#/components/schemas/...` for every `choices=[...]` input, written as
 * `{"allOf": [{"$ref": "#/components/schemas/aspect_ratio"}], "default": "1:1", "x-order": 3}`, and the
 * enum itself lives next to Input. Those references mean nothing once the schema is served on its own by
 * GET /v1/models/{slug}?fields=input_schema or compiled alone, so every reference is inlined here.
 */

import type { JsonObject } from './types.js';

const COMPONENT_PREFIX = '#/components/schemas/';

/** Keywords whose value is one subschema. */
const SINGLE_SCHEMA_KEYWORDS = [
  'additionalItems',
  'additionalProperties',
  'contains',
  'propertyNames',
  'not',
  'if',
  'then',
  'else',
  'unevaluatedItems',
  'unevaluatedProperties',
] as const;

/** Keywords whose value is a list of subschemas (`items` may also be one subschema). */
const SCHEMA_LIST_KEYWORDS = ['allOf', 'anyOf', 'oneOf', 'prefixItems', 'items'] as const;

/** Keywords whose value maps names to subschemas. */
const SCHEMA_MAP_KEYWORDS = [
  'properties',
  'patternProperties',
  'definitions',
  '$defs',
  'dependentSchemas',
] as const;

/**
 * Keywords that only describe a value. When an `allOf: [member]` wrapper is folded into its parent, the
 * parent's annotation wins over the member's (the property's own description is better than the enum's);
 * any other keyword present in both with different values keeps the wrapper, since folding would change
 * what validates.
 */
const ANNOTATION_KEYWORDS = new Set([
  'title',
  'description',
  'default',
  'examples',
  'deprecated',
  'readOnly',
  'writeOnly',
  'nullable',
]);

/** Cog gives every enum component this description; it tells a reader nothing. */
const COG_ENUM_BOILERPLATE = 'An enumeration.';

/**
 * The document was read but its schemas cannot be used (missing, or a `$ref` that cannot be inlined):
 * the model is taken offline, unlike a server that cannot be reached (src/predictions/setup.ts).
 */
export class CogSchemaError extends Error {
  override name = 'CogSchemaError';
}

export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A shallow copy of `schema` with every direct subschema replaced by `fn(subschema)`. It walks schema
 * positions only, so a `default` value or a property *named* `$ref` is never mistaken for a schema.
 * Boolean subschemas (`true`/`false`) are kept as they are.
 */
export function mapSubschemas(schema: JsonObject, fn: (subschema: JsonObject) => JsonObject): JsonObject {
  const out: JsonObject = { ...schema };
  const mapOne = (value: unknown): unknown => (isJsonObject(value) ? fn(value) : value);
  for (const keyword of SINGLE_SCHEMA_KEYWORDS) {
    if (keyword in out) out[keyword] = mapOne(out[keyword]);
  }
  for (const keyword of SCHEMA_LIST_KEYWORDS) {
    const value = out[keyword];
    if (Array.isArray(value)) out[keyword] = value.map(mapOne);
    else if (isJsonObject(value)) out[keyword] = fn(value);
  }
  for (const keyword of SCHEMA_MAP_KEYWORDS) {
    const value = out[keyword];
    if (!isJsonObject(value)) continue;
    const mapped: JsonObject = {};
    for (const [name, sub] of Object.entries(value)) mapped[name] = mapOne(sub);
    out[keyword] = mapped;
  }
  return out;
}

export interface CogSchemas {
  input: JsonObject;
  output: JsonObject;
}

/**
 * Reads `components.schemas.Input` and `components.schemas.Output` out of a Cog /openapi.json document,
 * with every `#/components/schemas/...` reference inlined. Throws an Error naming what is missing or
 * unresolvable; the caller adds which server and model it came from.
 */
export function schemasFromCogOpenApi(doc: unknown): CogSchemas {
  if (!isJsonObject(doc)) throw new CogSchemaError('Cog OpenAPI document is not a JSON object');
  const components = doc.components;
  if (!isJsonObject(components) || !isJsonObject(components.schemas)) {
    throw new CogSchemaError('Cog OpenAPI document has no components.schemas (is this a Cog server?)');
  }
  const schemas = components.schemas;
  const pick = (name: 'Input' | 'Output'): JsonObject => {
    const schema = schemas[name];
    if (!isJsonObject(schema)) {
      throw new CogSchemaError(
        `Cog OpenAPI document has no components.schemas.${name} (is this a Cog server?)`,
      );
    }
    return inlineRefs(schema, schemas, [name]);
  };
  return { input: pick('Input'), output: pick('Output') };
}

/**
 * `trail` is the chain of component names being expanded, so a self-referencing component (which Cog
 * never emits for inputs, but a recursive output model could) fails clearly instead of overflowing.
 */
function inlineRefs(schema: JsonObject, components: JsonObject, trail: readonly string[]): JsonObject {
  const { $ref: ref, ...rest } = schema;
  const own = mapSubschemas(rest, (sub) => inlineRefs(sub, components, trail));
  // OpenAPI 3.0 ignores keywords beside $ref, but Cog and pydantic put `default`, `description` and
  // `x-order` there meaning "this use of the component": keep them, over the component's own.
  const merged = ref === undefined ? own : { ...resolveRef(ref, components, trail), ...own };
  return foldSingleAllOf(merged);
}

function resolveRef(ref: unknown, components: JsonObject, trail: readonly string[]): JsonObject {
  if (typeof ref !== 'string' || !ref.startsWith(COMPONENT_PREFIX)) {
    throw new CogSchemaError(
      `Cog OpenAPI document: cannot inline $ref ${JSON.stringify(ref)} (only ${COMPONENT_PREFIX}…)`,
    );
  }
  const token = ref.slice(COMPONENT_PREFIX.length);
  if (token.includes('/')) {
    throw new CogSchemaError(`Cog OpenAPI document: cannot inline $ref ${ref} (points inside a component)`);
  }
  const name = decodeURIComponent(token).replaceAll('~1', '/').replaceAll('~0', '~');
  if (trail.includes(name)) {
    throw new CogSchemaError(`Cog OpenAPI document: circular $ref ${[...trail, name].join(' -> ')}`);
  }
  const target = components[name];
  if (!isJsonObject(target)) {
    throw new CogSchemaError(`Cog OpenAPI document: $ref ${ref} points at no schema`);
  }
  return inlineRefs(target, components, [...trail, name]);
}

/**
 * `{allOf: [{type, enum}], default, x-order}` becomes `{type, enum, default, x-order}`: the shape a client
 * (and the error messages) expect for an enum input, and one where OpenAPI's `nullable` sits next to a
 * `type` as ajv requires.
 */
function foldSingleAllOf(schema: JsonObject): JsonObject {
  const allOf = schema.allOf;
  if (!Array.isArray(allOf) || allOf.length !== 1 || !isJsonObject(allOf[0])) return schema;
  const { allOf: _wrapper, ...parent } = schema;
  const member: JsonObject = { ...allOf[0] };
  if (member.description === COG_ENUM_BOILERPLATE) delete member.description;
  for (const [keyword, value] of Object.entries(parent)) {
    if (!(keyword in member)) continue;
    const annotation = ANNOTATION_KEYWORDS.has(keyword) || keyword.startsWith('x-');
    if (!annotation && JSON.stringify(member[keyword]) !== JSON.stringify(value)) return schema;
  }
  return { ...member, ...parent };
}
