import { describe, expect, it } from 'vitest';
import { schemasFromCogOpenApi } from '../../providers/predictions/cog-openapi.js';
import {
  compileInputSchema,
  type FieldError,
  formatFieldErrors,
  type InputValidation,
  mergeTopLevelOptions,
  outputIsSingleUrl,
  REDACTED,
  redactInput,
} from '../../src/predictions/input-schema.js';

/** A Cog /openapi.json as a Cog server serves it: the enums live beside Input, referenced via allOf. */
function cogDocument(input: object, output: object, enums: Record<string, object>): unknown {
  return {
    openapi: '3.0.2',
    info: { title: 'Cog', version: '0.1.0' },
    paths: {},
    components: {
      schemas: {
        Input: { title: 'Input', type: 'object', ...input },
        Output: output,
        ...Object.fromEntries(
          Object.entries(enums).map(([name, schema]) => [
            name,
            { title: name, description: 'An enumeration.', ...schema },
          ]),
        ),
      },
    },
  };
}

const choice = (name: string, extra: object) => ({
  allOf: [{ $ref: `#/components/schemas/${name}` }],
  ...extra,
});

/** A flux-schnell-like text-to-image model. */
const flux = schemasFromCogOpenApi(
  cogDocument(
    {
      required: ['prompt'],
      properties: {
        seed: { type: 'integer', title: 'Seed', 'x-order': 5, description: 'Random seed' },
        prompt: { type: 'string', title: 'Prompt', 'x-order': 0 },
        image: { type: 'string', title: 'Image', format: 'uri', 'x-order': 2 },
        go_fast: { type: 'boolean', title: 'Go Fast', default: true, 'x-order': 9 },
        megapixels: choice('megapixels', { default: '1', 'x-order': 10 }),
        num_outputs: {
          type: 'integer',
          title: 'Num Outputs',
          default: 1,
          minimum: 1,
          maximum: 4,
          'x-order': 3,
        },
        aspect_ratio: choice('aspect_ratio', { default: '1:1', 'x-order': 1 }),
        output_format: choice('output_format', { default: 'webp', 'x-order': 6 }),
        output_quality: {
          type: 'integer',
          title: 'Output Quality',
          default: 80,
          minimum: 0,
          maximum: 100,
          'x-order': 7,
        },
        prompt_strength: { type: 'number', default: 0.8, minimum: 0, maximum: 1, 'x-order': 4 },
        disable_safety_checker: { type: 'boolean', default: false, 'x-order': 8 },
      },
    },
    { type: 'array', items: { type: 'string', format: 'uri' }, title: 'Output' },
    {
      aspect_ratio: {
        type: 'string',
        enum: ['1:1', '16:9', '21:9', '3:2', '2:3', '4:5', '5:4', '3:4', '4:3', '9:16', '9:21'],
      },
      output_format: { type: 'string', enum: ['webp', 'jpg', 'png'] },
      megapixels: { type: 'string', enum: ['1', '0.25'] },
    },
  ),
);

/** A partner-served model: the caller's own partner key travels inside input (spec 2.2). */
const partner = schemasFromCogOpenApi(
  cogDocument(
    {
      required: ['prompt'],
      properties: {
        prompt: { type: 'string', title: 'Prompt', 'x-order': 0 },
        aspect_ratio: choice('aspect_ratio', { default: '1:1', 'x-order': 1 }),
        replicate_api_key: {
          type: 'string',
          title: 'Replicate Api Key',
          format: 'password',
          'x-cog-secret': true,
          'x-order': 2,
        },
      },
    },
    { type: 'string', format: 'uri', title: 'Output' },
    { aspect_ratio: { type: 'string', enum: ['1:1', '16:9'] } },
  ),
);

/** A video model: duration is an integer enum of 5 or 10 seconds (spec 4.3, 8). */
const video = schemasFromCogOpenApi(
  cogDocument(
    {
      required: ['prompt'],
      properties: {
        prompt: { type: 'string', title: 'Prompt', 'x-order': 0 },
        duration: choice('duration', { default: 5, 'x-order': 1, description: 'Duration in seconds' }),
        cfg_scale: { type: 'number', default: 0.5, minimum: 0, maximum: 1, 'x-order': 2 },
        start_image: { type: 'string', format: 'uri', 'x-order': 3 },
        aspect_ratio: choice('aspect_ratio', { default: '16:9', 'x-order': 4 }),
        negative_prompt: { type: 'string', default: '', 'x-order': 5 },
      },
    },
    { type: 'string', format: 'uri', title: 'Output' },
    {
      duration: { type: 'integer', enum: [5, 10] },
      aspect_ratio: { type: 'string', enum: ['16:9', '9:16', '1:1'] },
    },
  ),
);

const fluxValidator = compileInputSchema(flux.input);
const partnerValidator = compileInputSchema(partner.input);
const videoValidator = compileInputSchema(video.input);

function failures(result: InputValidation): FieldError[] {
  if (result.ok) throw new Error(`expected a failure, got ${JSON.stringify(result.input)}`);
  return result.fields;
}

function accepted(result: InputValidation): Record<string, unknown> {
  if (!result.ok) throw new Error(`expected success, got ${formatFieldErrors(result.fields)}`);
  return result.input;
}

describe('compileInputSchema: defaults', () => {
  it('fills in every default of a flux-like model and leaves optional fields without one absent', () => {
    expect(accepted(fluxValidator.validate({ prompt: 'a red fox' }))).toEqual({
      prompt: 'a red fox',
      aspect_ratio: '1:1',
      num_outputs: 1,
      prompt_strength: 0.8,
      output_format: 'webp',
      output_quality: 80,
      disable_safety_checker: false,
      go_fast: true,
      megapixels: '1',
    });
  });

  it('keeps the values the caller gave over the defaults', () => {
    const input = accepted(
      fluxValidator.validate({
        prompt: 'a red fox',
        aspect_ratio: '16:9',
        num_outputs: 4,
        go_fast: false,
        megapixels: '0.25',
        seed: 42,
        output_quality: 0,
      }),
    );
    expect(input).toMatchObject({
      aspect_ratio: '16:9',
      num_outputs: 4,
      go_fast: false,
      megapixels: '0.25',
      seed: 42,
      output_quality: 0,
    });
  });

  it('applies integer enum defaults of a video model', () => {
    expect(accepted(videoValidator.validate({ prompt: 'waves' }))).toEqual({
      prompt: 'waves',
      duration: 5,
      cfg_scale: 0.5,
      aspect_ratio: '16:9',
      negative_prompt: '',
    });
    expect(accepted(videoValidator.validate({ prompt: 'waves', duration: 10 })).duration).toBe(10);
  });

  it('never modifies the object it is given', () => {
    const sent = { prompt: 'a red fox' };
    const input = accepted(fluxValidator.validate(sent));
    expect(sent).toEqual({ prompt: 'a red fox' });
    expect(input).not.toBe(sent);
  });

  it('accepts http(s) URLs and data: URIs for uri inputs', () => {
    for (const image of [
      'https://cdn.example.com/cat.png',
      'http://10.0.0.5:8080/a.jpg',
      'data:image/png;base64,iVBORw0KGgo=',
    ]) {
      expect(fluxValidator.validate({ prompt: 'x', image }).ok).toBe(true);
    }
  });
});

describe('compileInputSchema: failures', () => {
  it.each([
    ['a missing required field', {}, { field: 'prompt', message: 'is required' }],
    [
      'a value outside an enum',
      { prompt: 'x', aspect_ratio: '7:3' },
      {
        field: 'aspect_ratio',
        message: 'must be one of 1:1, 16:9, 21:9, 3:2, 2:3, 4:5, 5:4, 3:4, 4:3, 9:16, 9:21',
      },
    ],
    [
      'a number above maximum',
      { prompt: 'x', num_outputs: 5 },
      { field: 'num_outputs', message: 'must be <= 4' },
    ],
    [
      'a number below minimum',
      { prompt: 'x', num_outputs: 0 },
      { field: 'num_outputs', message: 'must be >= 1' },
    ],
    [
      'a quality above 100',
      { prompt: 'x', output_quality: 101 },
      { field: 'output_quality', message: 'must be <= 100' },
    ],
    [
      'a string that pydantic does not read as an integer',
      { prompt: 'x', num_outputs: '2.5' },
      { field: 'num_outputs', message: 'must be an integer, not a string' },
    ],
    [
      'a fraction where an integer belongs',
      { prompt: 'x', seed: 1.5 },
      { field: 'seed', message: 'must be an integer, not a fractional number' },
    ],
    [
      'a string where a boolean belongs',
      { prompt: 'x', go_fast: 'sure' },
      { field: 'go_fast', message: 'must be a boolean, not a string' },
    ],
    [
      'a number where a string enum belongs',
      { prompt: 'x', megapixels: 1 },
      { field: 'megapixels', message: 'must be a string, not an integer' },
    ],
    [
      'null for a required string',
      { prompt: null },
      { field: 'prompt', message: 'must be a string, not null' },
    ],
    [
      'a URL with an unfetchable scheme',
      { prompt: 'x', image: 'ftp://example.com/a.png' },
      { field: 'image', message: 'must be an http(s) URL or a data: URI' },
    ],
    [
      'a bare string as a URL',
      { prompt: 'x', image: 'cat.png' },
      { field: 'image', message: 'must be an http(s) URL or a data: URI' },
    ],
    [
      'an unknown (misspelt) field',
      { prompt: 'x', num_output: 2 },
      { field: 'num_output', message: 'is not an input of this model' },
    ],
  ])('reports %s', (_case, input, expected) => {
    expect(failures(fluxValidator.validate(input))).toEqual([expected]);
  });

  it.each([
    ['a string', 'a red fox'],
    ['an array', [{ prompt: 'x' }]],
    ['null', null],
    ['undefined', undefined],
  ])('reports an input that is %s', (_case, input) => {
    expect(failures(fluxValidator.validate(input))).toEqual([
      { field: 'input', message: 'must be an object' },
    ]);
  });

  it('reports a duration other than 5 or 10 seconds', () => {
    expect(failures(videoValidator.validate({ prompt: 'x', duration: 7 }))).toEqual([
      { field: 'duration', message: 'must be one of 5, 10' },
    ]);
    expect(failures(videoValidator.validate({ prompt: 'x', duration: '5s' }))).toEqual([
      { field: 'duration', message: 'must be an integer, not a string' },
    ]);
  });

  it('reports every failing field at once, one message each', () => {
    const fields = failures(
      fluxValidator.validate({ aspect_ratio: 'wide', num_outputs: 9, output_format: 'gif', extra: true }),
    );
    expect(fields).toHaveLength(5);
    expect(formatFieldErrors(fields).split('; ').sort()).toEqual([
      'aspect_ratio: must be one of 1:1, 16:9, 21:9, 3:2, 2:3, 4:5, 5:4, 3:4, 4:3, 9:16, 9:21',
      'extra: is not an input of this model',
      'num_outputs: must be <= 4',
      'output_format: must be one of webp, jpg, png',
      'prompt: is required',
    ]);
  });

  it('names array items and nested fields by path', () => {
    const validator = compileInputSchema({
      type: 'object',
      properties: {
        image_input: { type: 'array', items: { type: 'string', format: 'uri' }, maxItems: 3 },
        lora: {
          type: 'object',
          properties: { scale: { type: 'number', maximum: 2 } },
          additionalProperties: false,
        },
      },
    });
    expect(
      failures(
        validator.validate({ image_input: ['https://a.example/x.png', 'nope'], lora: { scale: 3, w: 1 } }),
      ),
    ).toEqual([
      { field: 'image_input[1]', message: 'must be an http(s) URL or a data: URI' },
      { field: 'lora.w', message: 'is not allowed here' },
      { field: 'lora.scale', message: 'must be <= 2' },
    ]);
    expect(failures(validator.validate({ image_input: ['a', 'b', 'c', 'd'] }))[0]).toEqual({
      field: 'image_input',
      message: 'must have at most 3 items',
    });
  });

  it('words string, pattern and exclusive-bound failures readably', () => {
    const validator = compileInputSchema({
      type: 'object',
      properties: {
        name: { type: 'string', minLength: 2, maxLength: 5, pattern: '^[a-z]+$' },
        // OpenAPI 3.0 writes an exclusive bound as a boolean beside minimum.
        guidance: { type: 'number', minimum: 0, exclusiveMinimum: true },
      },
    });
    expect(failures(validator.validate({ name: 'a' }))).toEqual([
      { field: 'name', message: 'must be at least 2 characters long' },
    ]);
    expect(failures(validator.validate({ name: 'abcdef' }))).toEqual([
      { field: 'name', message: 'must be at most 5 characters long' },
    ]);
    expect(failures(validator.validate({ name: 'AB' }))).toEqual([
      { field: 'name', message: 'must match the pattern ^[a-z]+$' },
    ]);
    expect(failures(validator.validate({ guidance: 0 }))).toEqual([
      { field: 'guidance', message: 'must be > 0' },
    ]);
    expect(validator.validate({ guidance: 0.1 }).ok).toBe(true);
  });
});

describe('compileInputSchema: schema dialect', () => {
  it('accepts null for OpenAPI nullable inputs, including optional choices', () => {
    const doc = cogDocument(
      {
        properties: {
          seed: { type: 'integer', nullable: true, 'x-order': 0 },
          style: choice('style', { nullable: true, default: null, 'x-order': 1 }),
        },
      },
      { type: 'string' },
      { style: { type: 'string', enum: ['anime', 'photo'] } },
    );
    const validator = compileInputSchema(schemasFromCogOpenApi(doc).input);
    expect(accepted(validator.validate({}))).toEqual({ style: null });
    expect(accepted(validator.validate({ seed: null, style: 'photo' }))).toEqual({
      seed: null,
      style: 'photo',
    });
    expect(failures(validator.validate({ style: 'oil' }))).toEqual([
      { field: 'style', message: 'must be one of anime, photo' },
    ]);
  });

  it('handles nullable beside an allOf that could not be folded into a type', () => {
    const validator = compileInputSchema({
      type: 'object',
      properties: { mode: { allOf: [{ enum: ['a', 'b'] }], nullable: true, description: 'Mode' } },
    });
    expect(validator.validate({ mode: null }).ok).toBe(true);
    expect(validator.validate({ mode: 'a' }).ok).toBe(true);
    expect(failures(validator.validate({ mode: 'c' }))).toEqual([
      { field: 'mode', message: 'must be one of a, b' },
    ]);
  });

  it('accepts any object for an empty catalog schema', () => {
    const validator = compileInputSchema({});
    expect(accepted(validator.validate({ anything: 1 }))).toEqual({ anything: 1 });
    expect(validator.fieldNames).toEqual([]);
  });

  it('respects a schema that allows extra fields explicitly', () => {
    const validator = compileInputSchema({
      type: 'object',
      properties: { prompt: { type: 'string' } },
      additionalProperties: true,
    });
    expect(validator.validate({ prompt: 'x', extra: 1 }).ok).toBe(true);
  });

  it('compiles a schema that declares another dialect, and ignores formats it does not know', () => {
    const validator = compileInputSchema({
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      properties: { at: { type: 'string', format: 'date-time' } },
    });
    expect(validator.validate({ at: 'whenever' }).ok).toBe(true);
  });

  it('throws when the schema itself is invalid', () => {
    expect(() => compileInputSchema({ type: 'object', properties: { a: { type: 'strng' } } })).toThrow(
      /input schema does not compile/,
    );
  });

  it('lists the fields in x-order', () => {
    expect(fluxValidator.fieldNames).toEqual([
      'prompt',
      'aspect_ratio',
      'image',
      'num_outputs',
      'prompt_strength',
      'seed',
      'output_format',
      'output_quality',
      'disable_safety_checker',
      'go_fast',
      'megapixels',
    ]);
  });
});

describe('secret fields', () => {
  it('finds the partner key declared format password and x-cog-secret', () => {
    expect(partnerValidator.secretFields).toEqual(['replicate_api_key']);
    expect(fluxValidator.secretFields).toEqual([]);
    expect(videoValidator.secretFields).toEqual([]);
  });

  it('finds secrets by any one of the three marks', () => {
    const validator = compileInputSchema({
      type: 'object',
      properties: {
        prompt: { type: 'string' },
        fal_api_key: { type: 'string' },
        token: { type: 'string', format: 'password' },
        hf_token: { type: 'string', 'x-cog-secret': true },
        api_keys_note: { type: 'string' },
      },
    });
    expect(validator.secretFields).toEqual(['fal_api_key', 'token', 'hf_token']);
  });

  it('accepts any string as a password', () => {
    const input = accepted(partnerValidator.validate({ prompt: 'x', replicate_api_key: 'r8_!@# not a uri' }));
    expect(input.replicate_api_key).toBe('r8_!@# not a uri');
  });

  it('redacts present secrets in a copy', () => {
    const input = { prompt: 'x', aspect_ratio: '1:1', replicate_api_key: 'r8_secret' };
    const shown = redactInput(input, partnerValidator.secretFields);
    expect(shown).toEqual({ prompt: 'x', aspect_ratio: '1:1', replicate_api_key: REDACTED });
    expect(REDACTED).toBe('**********');
    expect(input.replicate_api_key).toBe('r8_secret');
    expect(redactInput({ prompt: 'x' }, ['replicate_api_key'])).toEqual({ prompt: 'x' });
    expect(redactInput({ prompt: 'x', replicate_api_key: null }, ['replicate_api_key'])).toEqual({
      prompt: 'x',
      replicate_api_key: null,
    });
  });

  it('never echoes a mistyped secret in an error', () => {
    const fields = failures(partnerValidator.validate({ prompt: 'x', replicate_api_key: 123456789 }));
    expect(fields).toEqual([{ field: 'replicate_api_key', message: 'must be a string, not an integer' }]);
    expect(JSON.stringify(fields)).not.toContain('123456789');
  });
});

describe('mergeTopLevelOptions', () => {
  const body = { model: 'flux', width: 1024, height: 768, num_outputs: 2, strength: 0.7, input: {} };

  it('adds the top-level options the input lacks', () => {
    expect(mergeTopLevelOptions(body, { prompt: 'x' })).toEqual({
      prompt: 'x',
      width: 1024,
      height: 768,
      num_outputs: 2,
      strength: 0.7,
    });
  });

  it('lets a value inside input win over the top-level one', () => {
    expect(mergeTopLevelOptions(body, { prompt: 'x', num_outputs: 4, width: 512 })).toMatchObject({
      num_outputs: 4,
      width: 512,
      height: 768,
    });
  });

  it('merges only what the model declares when given its fields, so the rest is not an unknown input', () => {
    const merged = mergeTopLevelOptions(body, { prompt: 'x' }, fluxValidator.fieldNames);
    expect(merged).toEqual({ prompt: 'x', num_outputs: 2 });
    expect(fluxValidator.validate(merged).ok).toBe(true);
  });

  it('ignores null options and other body fields, and does not modify its arguments', () => {
    const input = { prompt: 'x' };
    expect(mergeTopLevelOptions({ model: 'm', width: null, await: true }, input)).toEqual({ prompt: 'x' });
    expect(input).toEqual({ prompt: 'x' });
  });

  it('feeds validation, whose messages then name the merged field', () => {
    const merged = mergeTopLevelOptions({ num_outputs: 8 }, { prompt: 'x' }, fluxValidator.fieldNames);
    expect(failures(fluxValidator.validate(merged))).toEqual([
      { field: 'num_outputs', message: 'must be <= 4' },
    ]);
  });
});

describe('outputIsSingleUrl', () => {
  it('is true for a single URL string and false for an array of URLs', () => {
    expect(outputIsSingleUrl(partner.output)).toBe(true);
    expect(outputIsSingleUrl(video.output)).toBe(true);
    expect(outputIsSingleUrl(flux.output)).toBe(false);
    expect(
      outputIsSingleUrl({
        type: 'array',
        items: { type: 'string', format: 'uri' },
        'x-cog-array-type': 'iterator',
      }),
    ).toBe(false);
    expect(outputIsSingleUrl(undefined)).toBe(false);
  });
});
