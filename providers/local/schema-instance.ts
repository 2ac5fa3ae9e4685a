/**
 * A deterministic instance of a JSON Schema: what the built-in chat model answers for a tool's
 * `parameters` and for `response_format` json_schema (rules in providers/local.ts and README.md).
 *
 * - `const`, then the first `enum` value, win over the type;
 * - `anyOf` / `oneOf`: the first branch that is not `{type: null}`; `allOf`: the branches merged;
 *   `$ref` to `#/$defs/…` or `#/definitions/…` of the root schema;
 * - a type list: its first type that is not `null`;
 * - object: its `required` properties; when it lists none, every property down to OPTIONAL_DEPTH levels
 *   (so a recursive schema ends); nothing else;
 * - array: `prefixItems`, then `minItems` (at least 1, at most MAX_ITEMS, within `maxItems`) copies of
 *   the instance of `items`;
 * - string: a fixed value for the formats date-time, date, time, email, uri/url, uuid; otherwise `text`
 *   (the last user message), or the property's name when that is empty, cut to MAX_STRING characters and
 *   to `maxLength`, padded with `-` to `minLength` (`pattern` is not honoured);
 * - number and integer: `minimum`, else one above `exclusiveMinimum`, else 0, kept within the maximums;
 * - boolean: true; null and anything unknown: null.
 * Nesting deeper than MAX_DEPTH (recursive `$ref`s) ends in null. The work is bounded whatever the
 * schema (nested `minItems` would multiply): past MAX_VALUES values, arrays get no more items than their
 * `prefixItems` (the instance may then break `minItems`), and past MAX_TEXT_CHARS characters of the
 * user's text, strings are their property's name.
 */

type Schema = Record<string, unknown>;

const MAX_DEPTH = 12;
const OPTIONAL_DEPTH = 4;
const MAX_ITEMS = 16;
const MAX_VALUES = 10_000;
/** Characters of the user's text used over all strings; later strings are their property's name. */
const MAX_TEXT_CHARS = 64 * 1024;
/** Strings are bounded: the arguments of a call must not echo a long prompt back whole. */
export const MAX_STRING = 200;

const FORMATS: Record<string, string> = {
  'date-time': '2024-01-01T00:00:00Z',
  date: '2024-01-01',
  time: '00:00:00Z',
  email: 'user@example.com',
  uri: 'https://example.com/',
  url: 'https://example.com/',
  uuid: '00000000-0000-4000-8000-000000000000',
};

function isSchema(value: unknown): value is Schema {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

export function schemaInstance(schema: unknown, text: string): unknown {
  return new Generator(isSchema(schema) ? schema : {}, text).value(schema, '', 0);
}

class Generator {
  private values = 0;
  private textChars = 0;
  /** The first MAX_STRING characters (code points) of the text, split once. */
  private readonly head: string[];

  constructor(
    private readonly root: Schema,
    text: string,
  ) {
    // A code point takes at most two UTF-16 units: this slice holds the first MAX_STRING of them.
    this.head = Array.from(text.trim().slice(0, 2 * MAX_STRING)).slice(0, MAX_STRING);
  }

  value(node: unknown, name: string, depth: number): unknown {
    this.values++;
    if (depth > MAX_DEPTH || !isSchema(node)) return node === false ? null : this.string({}, name);
    const schema = this.resolve(node, depth);
    if (schema === undefined) return null;
    if ('const' in schema) return schema.const;
    if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
    const branches = (schema.anyOf ?? schema.oneOf) as unknown;
    if (Array.isArray(branches) && branches.length > 0) {
      const branch = branches.find((b) => !(isSchema(b) && b.type === 'null')) ?? branches[0];
      return this.value(branch, name, depth + 1);
    }
    switch (typeOf(schema)) {
      case 'object':
        return this.object(schema, depth);
      case 'array':
        return this.array(schema, name, depth);
      case 'string':
        return this.string(schema, name);
      case 'integer':
        return this.number(schema, true);
      case 'number':
        return this.number(schema, false);
      case 'boolean':
        return true;
      case 'null':
        return null;
      default:
        return this.string(schema, name);
    }
  }

  /** The schema with its `$ref` followed and its `allOf` merged in. */
  private resolve(schema: Schema, depth: number): Schema | undefined {
    let out = schema;
    for (let hops = 0; typeof out.$ref === 'string'; hops++) {
      if (hops + depth > MAX_DEPTH) return undefined;
      const target = this.lookup(out.$ref as string);
      if (target === undefined) return undefined;
      const { $ref: _, ...rest } = out;
      out = { ...target, ...rest };
    }
    if (Array.isArray(out.allOf)) {
      const { allOf, ...rest } = out;
      let merged: Schema = rest;
      for (const part of allOf as unknown[]) {
        if (!isSchema(part)) continue;
        const resolved = this.resolve(part, depth + 1) ?? {};
        merged = {
          ...resolved,
          ...merged,
          properties: { ...(resolved.properties as Schema), ...(merged.properties as Schema) },
          required: [...asStrings(resolved.required), ...asStrings(merged.required)],
        };
      }
      out = merged;
    }
    return out;
  }

  private lookup(ref: string): Schema | undefined {
    if (ref === '#') return this.root;
    const match = /^#\/(\$defs|definitions)\/(.+)$/.exec(ref);
    if (!match) return undefined;
    const defs = this.root[match[1] as string];
    const name = (match[2] as string).replaceAll('~1', '/').replaceAll('~0', '~');
    const target = isSchema(defs) ? defs[name] : undefined;
    return isSchema(target) ? target : undefined;
  }

  private object(schema: Schema, depth: number): Record<string, unknown> {
    const properties = isSchema(schema.properties) ? schema.properties : {};
    const required = asStrings(schema.required);
    const optional = depth < OPTIONAL_DEPTH ? Object.keys(properties) : [];
    const names = Array.isArray(schema.required) ? required : optional;
    const out: Record<string, unknown> = {};
    for (const key of names) out[key] = this.value(properties[key] ?? {}, key, depth + 1);
    return out;
  }

  private array(schema: Schema, name: string, depth: number): unknown[] {
    const out: unknown[] = [];
    const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems : [];
    for (const item of prefix) out.push(this.value(item, name, depth + 1));
    const min = nonNegative(schema.minItems) ?? 1;
    const max = Math.min(nonNegative(schema.maxItems) ?? MAX_ITEMS, MAX_ITEMS);
    const count = this.values > MAX_VALUES ? 0 : Math.min(Math.max(min, 1), max);
    if (schema.items !== false) {
      while (out.length < count) out.push(this.value(schema.items ?? {}, name, depth + 1));
    }
    return out;
  }

  private string(schema: Schema, name: string): string {
    const format = typeof schema.format === 'string' ? FORMATS[schema.format] : undefined;
    if (format !== undefined) return format;
    const max = Math.min(nonNegative(schema.maxLength) ?? MAX_STRING, MAX_STRING);
    const text = this.textChars < MAX_TEXT_CHARS ? this.head.slice(0, max).join('') : '';
    this.textChars += text.length;
    const value =
      text ||
      Array.from(name || 'text')
        .slice(0, max)
        .join('');
    const min = nonNegative(schema.minLength) ?? 0;
    const length = Array.from(value).length;
    return length < min ? value + '-'.repeat(min - length) : value;
  }

  private number(schema: Schema, integer: boolean): number {
    const finite = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
    const minimum = finite(schema.minimum);
    const exclusiveMin = finite(schema.exclusiveMinimum);
    const maximum = finite(schema.maximum);
    const exclusiveMax = finite(schema.exclusiveMaximum);
    let value = minimum ?? (exclusiveMin === undefined ? 0 : exclusiveMin + 1);
    if (integer) value = Math.ceil(value);
    if (maximum !== undefined && value > maximum) value = integer ? Math.floor(maximum) : maximum;
    if (exclusiveMax !== undefined && value >= exclusiveMax) {
      value = integer ? Math.ceil(exclusiveMax) - 1 : exclusiveMax - 1;
    }
    return value;
  }
}

function typeOf(schema: Schema): string | undefined {
  const type = schema.type;
  if (typeof type === 'string') return type;
  if (Array.isArray(type)) return (type.find((t) => t !== 'null') ?? type[0]) as string | undefined;
  if (isSchema(schema.properties)) return 'object';
  if (schema.items !== undefined || schema.prefixItems !== undefined) return 'array';
  return undefined;
}

function asStrings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

function nonNegative(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
}
