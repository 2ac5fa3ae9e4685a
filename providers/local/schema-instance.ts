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
 * Nesting deeper than MAX_DEPTH (recursive `$ref`s) ends in null. The work and the size are bounded
 * whatever the schema (wide objects of recursive `$ref`s, `allOf`s and nested `minItems` multiply, and
 * `minLength` can ask for gigabytes): one InstanceBudget, shared by every instance of one reply, counts a
 * step per value, `$ref` hop, `allOf` branch, property and key copied, and the characters the instance
 * will take as JSON. Once MAX_STEPS or MAX_CHARS is spent, the rest is left out: objects lose their
 * remaining properties, arrays their remaining items, values are null (the instance may then break the
 * schema). Sizes a schema asks for are clamped: `minLength` to MAX_STRING, `minItems` to MAX_ITEMS;
 * `minProperties` and `pattern` are not honoured. Past MAX_TEXT_CHARS characters of the user's text,
 * strings are their property's name.
 */

type Schema = Record<string, unknown>;

const MAX_DEPTH = 12;
const OPTIONAL_DEPTH = 4;
const MAX_ITEMS = 16;
/** Steps of work over one reply: a few milliseconds, far above what a real tool schema needs. */
export const MAX_STEPS = 100_000;
/**
 * Characters of JSON over one reply: the answer is built whole before max_tokens cuts it, and the local
 * model's answers are 4,096 tokens by default (a few tens of kilobytes).
 */
export const MAX_CHARS = 256 * 1024;
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

/**
 * The work and size left for the instances of one reply (every tool called, or the JSON answer): each
 * step costs at most one pass over a piece of the request body and is charged here, so a reply costs
 * at most MAX_STEPS steps plus one body whatever the schemas.
 */
export class InstanceBudget {
  steps = 0;
  chars = 0;
  textChars = 0;

  charge(steps: number, chars = 0): void {
    this.steps += steps;
    this.chars += chars;
  }

  get spent(): boolean {
    return this.steps >= MAX_STEPS || this.chars >= MAX_CHARS;
  }
}

function isSchema(value: unknown): value is Schema {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

export function schemaInstance(schema: unknown, text: string, budget = new InstanceBudget()): unknown {
  return new Generator(isSchema(schema) ? schema : {}, text, budget).value(schema, '', 0);
}

class Generator {
  /** The first MAX_STRING characters (code points) of the text, split once. */
  private readonly head: string[];

  constructor(
    private readonly root: Schema,
    text: string,
    private readonly budget: InstanceBudget,
  ) {
    // A code point takes at most two UTF-16 units: this slice holds the first MAX_STRING of them.
    this.head = Array.from(text.trim().slice(0, 2 * MAX_STRING)).slice(0, MAX_STRING);
  }

  value(node: unknown, name: string, depth: number): unknown {
    if (this.budget.spent) return null;
    // `null,` at least, as JSON (the rest of a value is charged where it is made).
    this.budget.charge(1, 5);
    if (depth > MAX_DEPTH || !isSchema(node)) return node === false ? null : this.string({}, name);
    const schema = this.resolve(node, depth);
    if (schema === undefined) return null;
    if ('const' in schema) return this.literal(schema.const);
    if (Array.isArray(schema.enum) && schema.enum.length > 0) return this.literal(schema.enum[0]);
    const branches = (schema.anyOf ?? schema.oneOf) as unknown;
    if (Array.isArray(branches) && branches.length > 0) {
      const index = branches.findIndex((b) => !(isSchema(b) && b.type === 'null'));
      this.budget.charge(index < 0 ? branches.length : index);
      return this.value(branches[Math.max(index, 0)], name, depth + 1);
    }
    const typeOf = this.typeOf(schema);
    switch (typeOf) {
      case 'object':
        return this.object(schema, depth);
      case 'array':
        return this.array(schema, name, depth);
      case 'string':
        return this.string(schema, name);
      case 'integer':
      case 'number': {
        const value = this.number(schema, typeOf === 'integer');
        this.budget.charge(0, String(value).length);
        return value;
      }
      case 'boolean':
        return true;
      case 'null':
        return null;
      default:
        return this.string(schema, name);
    }
  }

  private typeOf(schema: Schema): string | undefined {
    const type = schema.type;
    if (typeof type === 'string') return type;
    if (Array.isArray(type)) {
      const index = type.findIndex((t) => t !== 'null');
      this.budget.charge(index < 0 ? type.length : index);
      return (index < 0 ? type[0] : type[index]) as string | undefined;
    }
    if (isSchema(schema.properties)) return 'object';
    if (schema.items !== undefined || schema.prefixItems !== undefined) return 'array';
    return undefined;
  }

  /** A `const` or `enum` value, copied from the request as is: charged its JSON size. */
  private literal(value: unknown): unknown {
    const size = JSON.stringify(value)?.length ?? 0;
    this.budget.charge(1 + Math.ceil(size / 64), size);
    return this.budget.spent ? null : value;
  }

  /** The schema with its `$ref` followed and its `allOf` merged in; undefined past the budget. */
  private resolve(schema: Schema, depth: number): Schema | undefined {
    let out = schema;
    for (let hops = 0; typeof out.$ref === 'string'; hops++) {
      if (hops + depth > MAX_DEPTH || this.budget.spent) return undefined;
      const target = this.lookup(out.$ref as string);
      if (target === undefined) return undefined;
      const { $ref: _, ...rest } = out;
      out = { ...target, ...rest };
      this.budget.charge(1 + Object.keys(out).length);
    }
    if (Array.isArray(out.allOf)) {
      if (depth > MAX_DEPTH) return undefined;
      const { allOf, ...rest } = out;
      let merged: Schema = rest;
      for (const part of allOf as unknown[]) {
        if (this.budget.spent) return undefined;
        this.budget.charge(1);
        if (!isSchema(part)) continue;
        const resolved = this.resolve(part, depth + 1) ?? {};
        const properties = { ...(resolved.properties as Schema), ...(merged.properties as Schema) };
        const scanned = lengthOf(resolved.required) + lengthOf(merged.required);
        const required = [...asStrings(resolved.required), ...asStrings(merged.required)];
        merged = { ...resolved, ...merged, properties, required };
        this.budget.charge(Object.keys(merged).length + Object.keys(properties).length + scanned);
      }
      out = merged;
    }
    return out;
  }

  private lookup(ref: string): Schema | undefined {
    // Matching reads the whole reference, which the request may make long.
    this.budget.charge(Math.ceil(ref.length / 64));
    if (ref === '#') return this.root;
    const match = /^#\/(\$defs|definitions)\/(.+)$/.exec(ref);
    if (!match) return undefined;
    const defs = this.root[match[1] as string];
    const name = (match[2] as string).replaceAll('~1', '/').replaceAll('~0', '~');
    const target = isSchema(defs) && Object.hasOwn(defs, name) ? defs[name] : undefined;
    return isSchema(target) ? target : undefined;
  }

  private object(schema: Schema, depth: number): Record<string, unknown> {
    const properties = isSchema(schema.properties) ? schema.properties : {};
    let names: unknown[] = [];
    if (Array.isArray(schema.required)) names = schema.required;
    else if (depth < OPTIONAL_DEPTH) {
      names = Object.keys(properties);
      this.budget.charge(names.length);
    }
    // Own properties only, and "__proto__" as an ordinary key: the names come from the request.
    const out: Record<string, unknown> = {};
    for (const key of names) {
      if (this.budget.spent) break;
      if (typeof key !== 'string' || Object.hasOwn(out, key)) {
        this.budget.charge(1);
        continue;
      }
      // `"key":` as JSON; a key past the bound is left out with its value.
      this.budget.charge(1, JSON.stringify(key).length + 1);
      if (this.budget.spent) break;
      const node = Object.hasOwn(properties, key) ? properties[key] : {};
      const value = this.value(node, key, depth + 1);
      Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
    }
    return out;
  }

  private array(schema: Schema, name: string, depth: number): unknown[] {
    const out: unknown[] = [];
    const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems : [];
    for (const item of prefix) {
      if (this.budget.spent) return out;
      out.push(this.value(item, name, depth + 1));
    }
    const min = nonNegative(schema.minItems) ?? 1;
    const max = Math.min(nonNegative(schema.maxItems) ?? MAX_ITEMS, MAX_ITEMS);
    const count = Math.min(Math.max(min, 1), max);
    if (schema.items !== false) {
      while (out.length < count && !this.budget.spent)
        out.push(this.value(schema.items ?? {}, name, depth + 1));
    }
    return out;
  }

  private string(schema: Schema, name: string): string {
    // Own keys only: a `format` such as "constructor" must not pick up Object.prototype's members.
    const format =
      typeof schema.format === 'string' && Object.hasOwn(FORMATS, schema.format)
        ? FORMATS[schema.format]
        : undefined;
    if (format !== undefined) return format;
    const max = Math.min(nonNegative(schema.maxLength) ?? MAX_STRING, MAX_STRING);
    const budget = this.budget;
    const text = budget.textChars < MAX_TEXT_CHARS ? this.head.slice(0, max).join('') : '';
    budget.textChars += text.length;
    // A property's name comes from the request and may be long: split only what can be used.
    const value =
      text ||
      Array.from((name || 'text').slice(0, 2 * max))
        .slice(0, max)
        .join('');
    const min = Math.min(nonNegative(schema.minLength) ?? 0, MAX_STRING);
    const length = Array.from(value).length;
    const out = length < min ? value + '-'.repeat(min - length) : value;
    budget.charge(1, JSON.stringify(out).length);
    return out;
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

function asStrings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

function lengthOf(value: unknown): number {
  return Array.isArray(value) ? value.length : 0;
}

function nonNegative(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
}
