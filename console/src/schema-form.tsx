/**
 * A form generated from a model's input schema (Cog style: properties ordered by x-order): strings,
 * numbers, integers, booleans, enums and files given as URLs, with their defaults and bounds. Empty fields
 * are left out, so the model's own defaults apply.
 */
import type { JSX } from 'preact';
import { useState } from 'preact/hooks';

export interface Prop {
  type?: string;
  title?: string;
  description?: string;
  enum?: unknown[];
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  format?: string;
  'x-order'?: number;
  allOf?: Array<{ $ref?: string; enum?: unknown[]; type?: string }>;
}

export interface InputSchema {
  properties?: Record<string, Prop>;
  required?: string[];
}

/** An enum given through allOf/$ref (older Cog) is read from the schema's own definitions when present. */
function resolve(prop: Prop, defs: Record<string, Prop>): Prop {
  const ref = prop.allOf?.[0]?.$ref;
  if (!ref) return prop;
  const target = defs[ref.split('/').pop() ?? ''];
  return target ? { ...target, ...prop, allOf: undefined } : { ...prop, type: prop.type ?? 'string' };
}

type Values = Record<string, string | boolean>;

function initial(props: Array<[string, Prop]>): Values {
  const values: Values = {};
  for (const [name, p] of props) {
    if (p.type === 'boolean') values[name] = p.default === true;
    else values[name] = p.default === undefined || p.default === null ? '' : String(p.default);
  }
  return values;
}

/** The input object: typed values, empty fields left out. */
function toInput(props: Array<[string, Prop]>, values: Values): Record<string, unknown> {
  const input: Record<string, unknown> = {};
  for (const [name, p] of props) {
    const v = values[name];
    if (p.type === 'boolean') {
      input[name] = v === true;
      continue;
    }
    if (typeof v !== 'string' || v === '') continue;
    if (p.type === 'integer' || p.type === 'number') input[name] = Number(v);
    else input[name] = v;
  }
  return input;
}

export function SchemaForm(props: {
  schema: InputSchema & { $defs?: Record<string, Prop>; definitions?: Record<string, Prop> };
  submitLabel: string;
  busy: boolean;
  onSubmit: (input: Record<string, unknown>) => void;
}) {
  const defs = { ...(props.schema.definitions ?? {}), ...(props.schema.$defs ?? {}) };
  const fields = Object.entries(props.schema.properties ?? {})
    .map(([name, p]) => [name, resolve(p, defs)] as [string, Prop])
    .sort(([, a], [, b]) => (a['x-order'] ?? 1e9) - (b['x-order'] ?? 1e9));
  const required = new Set(props.schema.required ?? []);
  const [values, setValues] = useState<Values>(() => initial(fields));
  const set = (name: string, value: string | boolean) => setValues((old) => ({ ...old, [name]: value }));

  const submit = (event: Event) => {
    event.preventDefault();
    props.onSubmit(toInput(fields, values));
  };

  return (
    <form class="schema-form" onSubmit={submit}>
      {fields.map(([name, p]) => {
        const id = `input-${name}`;
        const help = p.description ? `${id}-help` : undefined;
        const label = (
          <label for={id}>
            {p.title ?? name}
            {required.has(name) ? <span aria-hidden="true"> *</span> : null}
            {p.format === 'uri' ? ' (file URL)' : ''}
          </label>
        );
        const common = {
          id,
          name,
          required: required.has(name),
          'aria-describedby': help,
        };
        let control: JSX.Element;
        if (p.enum) {
          control = (
            <select
              {...common}
              value={String(values[name])}
              onChange={(e) => set(name, (e.target as HTMLSelectElement).value)}
            >
              {required.has(name) || p.default !== undefined ? null : <option value="">(default)</option>}
              {p.enum.map((option) => (
                <option key={String(option)} value={String(option)}>
                  {String(option)}
                </option>
              ))}
            </select>
          );
        } else if (p.type === 'boolean') {
          control = (
            <input
              {...common}
              required={false}
              type="checkbox"
              checked={values[name] === true}
              onChange={(e) => set(name, (e.target as HTMLInputElement).checked)}
            />
          );
        } else if (p.type === 'integer' || p.type === 'number') {
          control = (
            <input
              {...common}
              type="number"
              step={p.type === 'integer' ? 1 : 'any'}
              min={p.minimum}
              max={p.maximum}
              value={String(values[name])}
              onInput={(e) => set(name, (e.target as HTMLInputElement).value)}
            />
          );
        } else if (p.format === 'uri') {
          control = (
            <input
              {...common}
              type="url"
              placeholder="https://…"
              value={String(values[name])}
              onInput={(e) => set(name, (e.target as HTMLInputElement).value)}
            />
          );
        } else if (name === 'prompt' || (p.maxLength ?? 0) > 200) {
          control = (
            <textarea
              {...common}
              rows={3}
              minLength={p.minLength}
              maxLength={p.maxLength}
              value={String(values[name])}
              onInput={(e) => set(name, (e.target as HTMLTextAreaElement).value)}
            />
          );
        } else {
          control = (
            <input
              {...common}
              minLength={p.minLength}
              maxLength={p.maxLength}
              value={String(values[name])}
              onInput={(e) => set(name, (e.target as HTMLInputElement).value)}
            />
          );
        }
        return (
          <div class={`field ${p.type === 'boolean' ? 'check' : ''}`} key={name}>
            {label}
            {control}
            {help ? (
              <p id={help} class="help">
                {p.description}
                {p.minimum !== undefined || p.maximum !== undefined
                  ? ` (${p.minimum ?? '…'} to ${p.maximum ?? '…'})`
                  : ''}
              </p>
            ) : null}
          </div>
        );
      })}
      <button type="submit" class="primary" disabled={props.busy}>
        {props.submitLabel}
      </button>
    </form>
  );
}
