import { describe, expect, it } from 'vitest';
import { mapSubschemas, schemasFromCogOpenApi } from '../../providers/predictions/cog-openapi.js';

/** The shape a Cog server answers GET /openapi.json with (cog pkg/schema/openapi.go), trimmed. */
function cogDocument(schemas: Record<string, unknown>): Record<string, unknown> {
  return {
    openapi: '3.0.2',
    info: { title: 'Cog', version: '0.1.0' },
    paths: {
      '/predictions': {
        post: {
          requestBody: {
            content: { 'application/json': { schema: { $ref: '#/components/schemas/PredictionRequest' } } },
          },
        },
      },
    },
    components: {
      schemas: {
        ...schemas,
        PredictionRequest: {
          title: 'PredictionRequest',
          type: 'object',
          properties: { id: { title: 'Id', type: 'string' }, input: { $ref: '#/components/schemas/Input' } },
        },
        Status: {
          title: 'Status',
          description: 'An enumeration.',
          enum: ['starting', 'processing', 'succeeded', 'canceled', 'failed'],
          type: 'string',
        },
      },
    },
  };
}

const fluxDocument = cogDocument({
  Input: {
    title: 'Input',
    type: 'object',
    required: ['prompt'],
    properties: {
      prompt: { type: 'string', title: 'Prompt', 'x-order': 0, description: 'Prompt for generated image' },
      aspect_ratio: {
        allOf: [{ $ref: '#/components/schemas/aspect_ratio' }],
        default: '1:1',
        'x-order': 1,
        description: 'Aspect ratio for the generated image',
      },
      output_format: {
        allOf: [{ $ref: '#/components/schemas/output_format' }],
        default: 'webp',
        'x-order': 2,
      },
      num_outputs: {
        type: 'integer',
        title: 'Num Outputs',
        default: 1,
        minimum: 1,
        maximum: 4,
        'x-order': 3,
      },
    },
  },
  Output: {
    type: 'array',
    items: { type: 'string', format: 'uri' },
    title: 'Output',
  },
  aspect_ratio: {
    title: 'aspect_ratio',
    description: 'An enumeration.',
    enum: ['1:1', '16:9', '9:16'],
    type: 'string',
  },
  output_format: {
    title: 'output_format',
    description: 'An enumeration.',
    enum: ['webp', 'jpg', 'png'],
    type: 'string',
  },
});

describe('schemasFromCogOpenApi', () => {
  it('returns Input and Output with allOf/$ref enums folded into the property', () => {
    const { input, output } = schemasFromCogOpenApi(fluxDocument);
    const properties = input.properties as Record<string, Record<string, unknown>>;
    expect(properties.aspect_ratio).toEqual({
      title: 'aspect_ratio',
      enum: ['1:1', '16:9', '9:16'],
      type: 'string',
      default: '1:1',
      'x-order': 1,
      description: 'Aspect ratio for the generated image',
    });
    // Cog's boilerplate enum description is dropped rather than shown as the field's description.
    expect(properties.output_format).toEqual({
      title: 'output_format',
      enum: ['webp', 'jpg', 'png'],
      type: 'string',
      default: 'webp',
      'x-order': 2,
    });
    expect(properties.num_outputs).toMatchObject({ minimum: 1, maximum: 4, default: 1 });
    expect(input.required).toEqual(['prompt']);
    expect(output).toEqual({ type: 'array', items: { type: 'string', format: 'uri' }, title: 'Output' });
  });

  it('leaves no $ref behind, so the schemas stand alone', () => {
    const { input, output } = schemasFromCogOpenApi(fluxDocument);
    expect(JSON.stringify(input)).not.toContain('$ref');
    expect(JSON.stringify(output)).not.toContain('$ref');
  });

  it('does not modify the document it was given', () => {
    const before = JSON.stringify(fluxDocument);
    schemasFromCogOpenApi(fluxDocument);
    expect(JSON.stringify(fluxDocument)).toBe(before);
  });

  it('inlines a bare $ref, keeping the keywords written beside it', () => {
    const doc = cogDocument({
      Input: {
        type: 'object',
        properties: {
          quality: { $ref: '#/components/schemas/quality', default: 'high', 'x-order': 0 },
        },
      },
      Output: { $ref: '#/components/schemas/Result' },
      quality: { title: 'quality', enum: ['low', 'high'], type: 'string' },
      Result: {
        title: 'Result',
        type: 'object',
        properties: { files: { type: 'array', items: { $ref: '#/components/schemas/File' } } },
      },
      File: { type: 'string', format: 'uri' },
    });
    const { input, output } = schemasFromCogOpenApi(doc);
    expect((input.properties as Record<string, unknown>).quality).toEqual({
      title: 'quality',
      enum: ['low', 'high'],
      type: 'string',
      default: 'high',
      'x-order': 0,
    });
    expect(output).toEqual({
      title: 'Result',
      type: 'object',
      properties: { files: { type: 'array', items: { type: 'string', format: 'uri' } } },
    });
  });

  it('keeps an allOf wrapper that cannot be folded without changing what validates', () => {
    const doc = cogDocument({
      Input: {
        type: 'object',
        properties: { level: { allOf: [{ $ref: '#/components/schemas/level' }], maximum: 3 } },
      },
      Output: { type: 'string', format: 'uri' },
      level: { type: 'integer', maximum: 5 },
    });
    const { input } = schemasFromCogOpenApi(doc);
    expect((input.properties as Record<string, unknown>).level).toEqual({
      allOf: [{ type: 'integer', maximum: 5 }],
      maximum: 3,
    });
  });

  it('keeps OpenAPI nullable next to the folded type (Optional choices)', () => {
    const doc = cogDocument({
      Input: {
        type: 'object',
        properties: {
          style: { allOf: [{ $ref: '#/components/schemas/style' }], nullable: true, default: null },
        },
      },
      Output: { type: 'string', format: 'uri' },
      style: { title: 'style', description: 'An enumeration.', enum: ['anime', 'photo'], type: 'string' },
    });
    const { input } = schemasFromCogOpenApi(doc);
    expect((input.properties as Record<string, unknown>).style).toEqual({
      title: 'style',
      enum: ['anime', 'photo'],
      type: 'string',
      nullable: true,
      default: null,
    });
  });

  it('does not treat a default value or a property named $ref as a reference', () => {
    const doc = cogDocument({
      Input: {
        type: 'object',
        properties: {
          $ref: { type: 'string' },
          options: { type: 'object', default: { $ref: 'not-a-schema' } },
        },
      },
      Output: { type: 'string' },
    });
    const { input } = schemasFromCogOpenApi(doc);
    expect(input.properties).toEqual({
      $ref: { type: 'string' },
      options: { type: 'object', default: { $ref: 'not-a-schema' } },
    });
  });

  it.each([
    ['not an object', 'nope', /not a JSON object/],
    ['no components', { openapi: '3.0.2', paths: {} }, /no components\.schemas/],
    ['no Input', cogDocument({ Output: { type: 'string' } }), /no components\.schemas\.Input/],
    ['no Output', cogDocument({ Input: { type: 'object' } }), /no components\.schemas\.Output/],
  ])('throws a clear error on a document with %s', (_case, doc, message) => {
    expect(() => schemasFromCogOpenApi(doc)).toThrow(message);
  });

  it('throws on a reference it cannot resolve', () => {
    const missing = cogDocument({
      Input: { type: 'object', properties: { a: { allOf: [{ $ref: '#/components/schemas/gone' }] } } },
      Output: { type: 'string' },
    });
    expect(() => schemasFromCogOpenApi(missing)).toThrow(
      '$ref #/components/schemas/gone points at no schema',
    );

    const external = cogDocument({
      Input: { type: 'object', properties: { a: { $ref: 'https://example.com/schema.json' } } },
      Output: { type: 'string' },
    });
    expect(() => schemasFromCogOpenApi(external)).toThrow(/cannot inline \$ref/);
  });

  it('throws on a circular reference instead of recursing forever', () => {
    const doc = cogDocument({
      Input: { type: 'object' },
      Output: { $ref: '#/components/schemas/Node' },
      Node: {
        type: 'object',
        properties: { children: { type: 'array', items: { $ref: '#/components/schemas/Node' } } },
      },
    });
    expect(() => schemasFromCogOpenApi(doc)).toThrow('circular $ref Output -> Node -> Node');
  });
});

describe('mapSubschemas', () => {
  it('visits schema positions only', () => {
    const seen: unknown[] = [];
    mapSubschemas(
      {
        type: 'object',
        default: { type: 'ignored' },
        properties: { a: { type: 'string' } },
        items: [{ type: 'integer' }],
        additionalProperties: false,
        anyOf: [{ type: 'null' }],
      },
      (sub) => {
        seen.push(sub.type);
        return sub;
      },
    );
    expect(seen.sort()).toEqual(['integer', 'null', 'string']);
  });
});
