/**
 * Validates values against OpenAI's published OpenAPI 3.1 spec: the component schemas the tests use,
 * vendored in test/fixtures/openai-openapi/ (source, commit and licence in its README.md). The YAML is
 * parsed once and cached as JSON in the OS temp directory, keyed by the file's content, so each test
 * process after the first loads it in milliseconds.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import { parse as parseYaml } from 'yaml';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const OPENAPI_PATH = path.join(repoRoot, 'test/fixtures/openai-openapi/openapi.yaml');
const DOC_ID = 'https://gantry.test/openai-openapi.json';
/** Bump when preprocess() changes, so stale caches are not reused. */
const CACHE_VERSION = 1;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonRecord = { [key: string]: Json };

let doc: JsonRecord | undefined;
let ajv: Ajv2020 | undefined;
const validators = new Map<string, ValidateFunction>();

function isRecord(value: unknown): value is JsonRecord {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** The spec as JSON, with OpenAPI-only constructs rewritten into JSON Schema 2020-12. */
export function loadOpenAPIDocument(): JsonRecord {
  if (doc) return doc;
  const text = readFileSync(OPENAPI_PATH, 'utf8');
  const key = createHash('sha256').update(`${CACHE_VERSION}:${text}`).digest('hex').slice(0, 16);
  const cacheDir = path.join(os.tmpdir(), 'gantry-openapi-cache');
  const cacheFile = path.join(cacheDir, `openapi-${key}.json`);
  try {
    const cached: unknown = JSON.parse(readFileSync(cacheFile, 'utf8'));
    if (isRecord(cached)) doc = cached;
  } catch {
    // not cached yet (or corrupt): parse the YAML below
  }
  if (!doc) {
    const parsed: unknown = parseYaml(text, { maxAliasCount: -1 });
    if (!isRecord(parsed)) throw new Error(`${OPENAPI_PATH} is not a YAML mapping`);
    doc = preprocess(parsed) as JsonRecord;
    try {
      mkdirSync(cacheDir, { recursive: true });
      // Write then rename, so a parallel test process never reads a half-written file.
      const tmp = `${cacheFile}.${process.pid}.${Date.now()}.tmp`;
      writeFileSync(tmp, JSON.stringify(doc));
      renameSync(tmp, cacheFile);
    } catch {
      // the cache is an optimisation only
    }
  }
  return doc;
}

/**
 * Rewrites OpenAPI leftovers: `nullable: true` becomes a null-permitting type (or an anyOf with null
 * where the schema has no `type`, e.g. a bare `$ref` or `allOf`), and `#/...` refs point into the
 * document registered under DOC_ID.
 */
function preprocess(node: Json): Json {
  if (Array.isArray(node)) return node.map(preprocess);
  if (!isRecord(node)) return node;
  const out: JsonRecord = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === '$ref' && typeof v === 'string' && v.startsWith('#/')) out[k] = `${DOC_ID}${v}`;
    else out[k] = preprocess(v);
  }
  if (out.nullable === true) {
    delete out.nullable;
    return makeNullable(out);
  }
  if ('nullable' in out && out.nullable === false) delete out.nullable;
  return out;
}

function makeNullable(schema: JsonRecord): JsonRecord {
  const type = schema.type;
  if (typeof type === 'string' || Array.isArray(type)) {
    const types = Array.isArray(type) ? type : [type];
    const result: JsonRecord = { ...schema, type: types.includes('null') ? types : [...types, 'null'] };
    if (Array.isArray(schema.enum) && !schema.enum.includes(null)) result.enum = [...schema.enum, null];
    if ('const' in schema) {
      delete result.const;
      result.enum = [schema.const ?? null, null];
    }
    return result;
  }
  // No `type`: $ref siblings, allOf/anyOf/oneOf. Keep annotations outside, the constraints inside.
  const { description, title, default: dflt, deprecated, ...rest } = schema;
  const wrapped: JsonRecord = { anyOf: [{ type: 'null' }, rest] };
  if (description !== undefined) wrapped.description = description;
  if (title !== undefined) wrapped.title = title;
  if (dflt !== undefined) wrapped.default = dflt;
  if (deprecated !== undefined) wrapped.deprecated = deprecated;
  return wrapped;
}

function getAjv(): Ajv2020 {
  if (ajv) return ajv;
  const document = loadOpenAPIDocument();
  const instance = new Ajv2020({ strict: false, allErrors: true, validateFormats: false, logger: false });
  instance.addSchema({ ...document, $id: DOC_ID });
  ajv = instance;
  return instance;
}

function validatorFor(schemaName: string): ValidateFunction {
  const cached = validators.get(schemaName);
  if (cached) return cached;
  const components = loadOpenAPIDocument().components;
  const schemas = isRecord(components) ? components.schemas : undefined;
  if (!isRecord(schemas) || !(schemaName in schemas)) {
    throw new Error(
      `the OpenAI spec has no schema named ${schemaName} (the vendored subset: add it to ROOTS in scripts/vendor-openai-schemas.ts)`,
    );
  }
  const validate = getAjv().compile({ $ref: `${DOC_ID}#/components/schemas/${schemaName}` });
  validators.set(schemaName, validate);
  return validate;
}

function describe(errors: ErrorObject[] | null | undefined): string[] {
  return (errors ?? []).map((e) => {
    const extra =
      e.keyword === 'additionalProperties' && isRecord(e.params)
        ? ` (${String(e.params.additionalProperty)})`
        : e.keyword === 'enum' && isRecord(e.params) && Array.isArray(e.params.allowedValues)
          ? ` (${e.params.allowedValues.map((v) => JSON.stringify(v)).join(', ')})`
          : e.keyword === 'const' && isRecord(e.params)
            ? ` (${JSON.stringify(e.params.allowedValue)})`
            : '';
    return `${e.instancePath || '/'} ${e.message ?? e.keyword}${extra}`;
  });
}

/** The ajv errors of `value` against `components.schemas[schemaName]`; [] when it is valid. */
export function openAISchemaErrors(schemaName: string, value: unknown): string[] {
  const validate = validatorFor(schemaName);
  return validate(value) ? [] : describe(validate.errors);
}

/** Throws, listing every schema error, unless `value` matches `components.schemas[schemaName]`. */
export function assertOpenAISchema(schemaName: string, value: unknown): void {
  const errors = openAISchemaErrors(schemaName, value);
  if (errors.length === 0) return;
  const shown = errors.slice(0, 40);
  const more = errors.length > shown.length ? `\n  ... and ${errors.length - shown.length} more` : '';
  throw new Error(
    `value does not match OpenAI schema ${schemaName}:\n  ${shown.join('\n  ')}${more}\nvalue: ${truncate(
      JSON.stringify(value),
    )}`,
  );
}

function truncate(text: string | undefined): string {
  if (text === undefined) return 'undefined';
  return text.length > 2000 ? `${text.slice(0, 2000)}...` : text;
}
