/**
 * The input rules that make Gantry accept what Python Cog accepts (README, Predictions: inputs), one class per
 * block: pydantic's conversions, defaults never checked against their own schema, old Cog spellings and
 * repairs, unknown inputs, bounds, and the Prefer / Cancel-After headers. The whole-gateway view is in
 * inputs-e2e.test.ts and cog-corpus.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { GantryError } from '../../src/errors.js';
import { coerceScalar } from '../../src/predictions/input-coercion.js';
import { pydanticGeneration } from '../../src/predictions/input-dialect.js';
import { compileInputSchema, type InputValidation } from '../../src/predictions/input-schema.js';
import { cancelAfterMs, preferWaitMs } from '../../src/predictions/request-headers.js';

const accepted = (result: InputValidation) => {
  if (!result.ok) throw new Error(`refused: ${JSON.stringify(result.fields)}`);
  return result.input;
};
const refusedFields = (result: InputValidation) => {
  if (result.ok) throw new Error(`accepted: ${JSON.stringify(result.input)}`);
  return result.fields.map((f) => f.field);
};

describe("pydantic's lax conversions", () => {
  it.each([
    ['integer', '1024', 1024],
    ['integer', ' 7 ', 7],
    ['integer', '-3', -3],
    ['integer', '+5', 5],
    ['number', '7', 7],
    ['number', '0.5', 0.5],
    ['number', ' 1e3 ', 1000],
    ['number', '.5', 0.5],
    ['boolean', 'true', true],
    ['boolean', 'False', false],
    ['boolean', 'YES', true],
    ['boolean', 'off', false],
    ['boolean', 't', true],
    ['boolean', 'n', false],
    ['boolean', 1, true],
    ['boolean', 0, false],
  ] as const)('reads %s from %j', (type, value, expected) => {
    expect(coerceScalar(type, value)).toBe(expected);
  });

  it.each([
    ['integer', '3.5'],
    ['integer', '1e3'],
    ['integer', ''],
    ['integer', 'seven'],
    ['integer', '99999999999999999999'],
    ['number', 'inf'],
    ['number', 'nan'],
    ['number', '1,5'],
    ['number', ''],
    ['boolean', 'maybe'],
    ['boolean', 2],
    ['boolean', ''],
  ] as const)('does not read %s from %j', (type, value) => {
    expect(coerceScalar(type, value)).toBeUndefined();
  });

  const validator = compileInputSchema({
    type: 'object',
    required: ['prompt'],
    properties: {
      prompt: { type: 'string' },
      steps: { type: 'integer', minimum: 1, maximum: 50 },
      scale: { type: 'number' },
      fast: { type: 'boolean' },
      seeds: { type: 'array', items: { type: 'integer' } },
      label: { anyOf: [{ type: 'string' }, { type: 'integer' }] },
      negative: { type: 'string' },
      maybe: { anyOf: [{ type: 'integer' }, { type: 'null' }], default: 3 },
    },
  });

  it('passes the converted values on, never a number where a string is expected', () => {
    expect(
      accepted(
        validator.validate({
          prompt: 'x',
          steps: '20',
          scale: '7',
          fast: 'true',
          seeds: ['1', 2],
          label: '12',
        }),
      ),
    ).toEqual({ prompt: 'x', steps: 20, scale: 7, fast: true, seeds: [1, 2], label: '12', maybe: 3 });
    expect(refusedFields(validator.validate({ prompt: 7 }))).toEqual(['prompt']);
  });

  it('checks bounds on the converted value', () => {
    expect(refusedFields(validator.validate({ prompt: 'x', steps: '51' }))).toEqual(['steps']);
  });

  it('treats null for an optional input as absent, unless the schema takes null', () => {
    expect(accepted(validator.validate({ prompt: 'x', negative: null, maybe: null }))).toEqual({
      prompt: 'x',
      maybe: null,
    });
    expect(refusedFields(validator.validate({ prompt: null }))).toEqual(['prompt']);
  });

  it('never changes the caller object', () => {
    const input = { prompt: 'x', steps: '20' };
    validator.validate(input);
    expect(input).toEqual({ prompt: 'x', steps: '20' });
  });
});

describe("pydantic v1's wider conversions, for a schema pydantic v1 wrote", () => {
  const properties = {
    prompt: { type: 'string' },
    steps: { type: 'integer', minimum: 1, maximum: 50 },
    scale: { type: 'number' },
    image: { type: 'string', format: 'uri' },
    mode: { type: 'string', enum: ['1', '2'] },
  };
  // Cog <= 0.9 (pydantic v1): an optional input is only left out of `required`.
  const v1Schema = { type: 'object', properties };
  // pydantic v2 writes an optional input as anyOf with null.
  const v2Schema = {
    type: 'object',
    properties: { ...properties, seed: { anyOf: [{ type: 'integer' }, { type: 'null' }], default: null } },
  };
  // As Gantry compiles a schema read from a Cog server (src/predictions/setup.ts).
  const fromCog = (schema: Record<string, unknown>) =>
    compileInputSchema(schema, { pydantic: pydanticGeneration(schema) });
  const v1 = fromCog(v1Schema);
  const v2 = fromCog(v2Schema);

  it('tells the generations apart by whether an input lists null', () => {
    expect(pydanticGeneration(v1Schema)).toBe('v1');
    expect(pydanticGeneration(v2Schema)).toBe('v2');
    expect(pydanticGeneration({ properties: { a: { type: ['integer', 'null'] } } })).toBe('v2');
    expect(pydanticGeneration({ properties: { a: { type: 'string', nullable: true } } })).toBe('v2');
  });

  it('gives a schema not read from a Cog server (the catalog, a local model) the narrower v2 rules', () => {
    expect(refusedFields(compileInputSchema(v1Schema).validate({ prompt: 7 }))).toEqual(['prompt']);
  });

  it('makes text of a number or boolean for a plain text input, as str(v)', () => {
    expect(accepted(v1.validate({ prompt: 7 }))).toEqual({ prompt: '7' });
    expect(accepted(v1.validate({ prompt: 0.5 }))).toEqual({ prompt: '0.5' });
    expect(accepted(v1.validate({ prompt: true }))).toEqual({ prompt: 'True' });
    expect(refusedFields(v2.validate({ prompt: 7 }))).toEqual(['prompt']);
  });

  it('truncates a fractional number for an integer input, as int(v), then checks bounds', () => {
    expect(accepted(v1.validate({ steps: 7.5 }))).toEqual({ steps: 7 });
    expect(accepted(v1.validate({ steps: 1.9 }))).toEqual({ steps: 1 });
    expect(refusedFields(v1.validate({ steps: 50.5 + 1 }))).toEqual(['steps']);
    expect(refusedFields(v1.validate({ steps: '7.5' }))).toEqual(['steps']);
    expect(refusedFields(v2.validate({ steps: 7.5 }))).toEqual(['steps']);
  });

  it('reads a boolean as 1 or 0 for a number', () => {
    expect(accepted(v1.validate({ scale: false, steps: true }))).toEqual({ scale: 0, steps: 1 });
    expect(refusedFields(v2.validate({ scale: true }))).toEqual(['scale']);
  });

  it('leaves file and choice inputs alone (a number is no URL; an enum member is matched as sent)', () => {
    expect(refusedFields(v1.validate({ image: 7 }))).toEqual(['image']);
    expect(refusedFields(v1.validate({ mode: 1 }))).toEqual(['mode']);
  });
});

describe('defaults are not checked against their own schema', () => {
  const validator = compileInputSchema({
    type: 'object',
    properties: {
      seed: { type: 'integer', default: null },
      image: { type: 'string', format: 'uri', default: 'clown.webp' },
      guidance: { type: 'integer', default: 7.5 },
      mode: { type: 'string', enum: ['a', 'b'], default: 'c' },
      steps: { type: 'integer', default: 20 },
    },
  });

  it('fills in the defaults that fit and leaves the others to the backend', () => {
    expect(accepted(validator.validate({}))).toEqual({ steps: 20 });
  });

  it('passes on, unchecked and as sent, exactly the default the schema author set', () => {
    expect(accepted(validator.validate({ image: 'clown.webp', guidance: 7.5 }))).toEqual({
      image: 'clown.webp',
      guidance: 7.5,
      steps: 20,
    });
    // Not a choice outside the input's enum: Cog checks a sent value against its choices.
    expect(refusedFields(validator.validate({ mode: 'c' }))).toEqual(['mode']);
  });

  it('still checks any other value the caller sends', () => {
    expect(
      refusedFields(validator.validate({ image: 'cat.png', guidance: '7.5', mode: 'd' })).sort(),
    ).toEqual(['guidance', 'image', 'mode']);
    expect(refusedFields(validator.validate({ image: ['clown.webp'] }))).toEqual(['image']);
    expect(accepted(validator.validate({ seed: 4 }))).toEqual({ seed: 4, steps: 20 });
  });
});

describe('schema spellings and repairs', () => {
  it("enforces old Cog's pydantic names (ge, le, gt, lt, min_length, max_length, regex, multiple_of)", () => {
    const repairs: string[] = [];
    const validator = compileInputSchema(
      {
        type: 'object',
        properties: {
          n: { type: 'integer', ge: 1, le: 4 },
          s: { type: 'number', gt: 0, lt: 1 },
          text: { type: 'string', min_length: 2, max_length: 3, regex: '^[a-z]+$' },
          step: { type: 'integer', multiple_of: 5 },
        },
      },
      { repairs },
    );
    expect(accepted(validator.validate({ n: 4, s: 0.5, text: 'ab', step: 10 }))).toBeDefined();
    expect(refusedFields(validator.validate({ n: 5, s: 1, text: 'a', step: 7 })).sort()).toEqual([
      'n',
      's',
      'step',
      'text',
    ]);
    expect(refusedFields(validator.validate({ n: 0, s: 0, text: 'ABC' })).sort()).toEqual(['n', 's', 'text']);
    expect(refusedFields(validator.validate({ text: 'abcd' }))).toEqual(['text']);
  });

  it('removes repeated enum items and converts string items of an integer or boolean enum (Cog 0.1)', () => {
    const repairs: string[] = [];
    const validator = compileInputSchema(
      {
        type: 'object',
        properties: {
          width: { type: 'integer', enum: ['512', '768', '768'], default: 512 },
          hd: { type: 'boolean', enum: ['True', 'False'], default: false },
          mode: { type: 'string', enum: ['x', 'x', 'y'] },
        },
      },
      { repairs },
    );
    expect(repairs.sort()).toEqual([
      'hd: enum items converted to boolean',
      'mode: repeated enum items removed',
      'width: enum items converted to integer',
      'width: repeated enum items removed',
    ]);
    expect(accepted(validator.validate({}))).toEqual({ width: 512, hd: false });
    expect(accepted(validator.validate({ width: '768', hd: 'true', mode: 'y' }))).toEqual({
      width: 768,
      hd: true,
      mode: 'y',
    });
    expect(refusedFields(validator.validate({ width: 700 }))).toEqual(['width']);
  });

  it('throws on a schema it cannot repair (a pattern only Python reads)', () => {
    expect(() =>
      compileInputSchema({ type: 'object', properties: { c: { type: 'string', pattern: '(?P<x>a)' } } }),
    ).toThrow(/input schema does not compile/);
  });
});

describe('unknown inputs', () => {
  const schema = { type: 'object', properties: { prompt: { type: 'string' } } };

  it('are refused by default, each one named', () => {
    const result = compileInputSchema(schema).validate({ prompt: 'x', foo: 1, bar: 2 });
    expect(refusedFields(result).sort()).toEqual(['bar', 'foo']);
  });

  it('are dropped and listed with unknownInputs: drop', () => {
    const result = compileInputSchema(schema, { unknownInputs: 'drop' }).validate({ prompt: 'x', foo: 1 });
    expect(result).toEqual({ ok: true, input: { prompt: 'x' }, dropped: ['foo'] });
  });
});

describe('Prefer and Cancel-After', () => {
  it.each([
    [undefined, undefined],
    ['respond-async', undefined],
    ['wait', 60_000],
    ['wait=1', 1_000],
    ['wait=60', 60_000],
    ['respond-async, wait=5', 5_000],
  ])('Prefer: %s waits %s ms', (header, ms) => {
    expect(preferWaitMs(header)).toBe(ms);
  });

  it.each(['wait=0', 'wait=61', 'wait=', 'wait=2s', 'wait=-1'])('Prefer: %s is refused', (header) => {
    expect(() => preferWaitMs(header)).toThrow(GantryError);
  });

  it.each([
    [undefined, undefined],
    ['30', 30_000],
    ['30s', 30_000],
    ['5m', 300_000],
    ['1h30m', 5_400_000],
    ['1h2m3s', 3_723_000],
    ['5', 5_000],
  ])('Cancel-After: %s is %s ms', (header, ms) => {
    expect(cancelAfterMs(header)).toBe(ms);
  });

  it.each(['4', '4s', '', 'm', '1x', '5m3h', '1.5m', '25h', 'soon'])(
    'Cancel-After: %j is refused',
    (header) => {
      expect(() => cancelAfterMs(header)).toThrow(GantryError);
    },
  );
});
