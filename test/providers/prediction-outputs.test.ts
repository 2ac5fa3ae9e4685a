import { describe, expect, it } from 'vitest';
import { schemasFromCogOpenApi } from '../../providers/predictions/cog-openapi.js';
import { isConcatenatedText, shapeOutput } from '../../providers/predictions/outputs.js';
import {
  dataUriFile,
  extensionFor,
  lastPercentage,
  parseDataUri,
} from '../../providers/predictions/shared.js';

const PNG_URI = 'data:image/png;base64,iVBORw0KGgo=';
const URI_LIST = { type: 'array', items: { type: 'string', format: 'uri' } };

describe('shapeOutput: outputs keep the shape the model produced', () => {
  it('keeps numbers, objects, lists of strings and scalars as JSON', () => {
    expect(shapeOutput([0.25, -0.5, 0.125], URI_LIST)).toEqual({ value: [0.25, -0.5, 0.125], files: [] });
    expect(
      shapeOutput(
        [
          { label: 'cat', score: 0.9 },
          { label: 'dog', score: 0.1 },
        ],
        undefined,
      ).value,
    ).toEqual([
      { label: 'cat', score: 0.9 },
      { label: 'dog', score: 0.1 },
    ]);
    expect(shapeOutput(['cat', 'dog'], { type: 'array', items: { type: 'string' } }).value).toEqual([
      'cat',
      'dog',
    ]);
    expect(shapeOutput(42, { type: 'integer' }).value).toBe(42);
    expect(shapeOutput(true, undefined).value).toBe(true);
    expect(shapeOutput(null, undefined)).toEqual({ value: null, files: [] });
    expect(shapeOutput(undefined, undefined)).toEqual({ value: null, files: [] });
  });

  it('joins text pieces only for Cog’s concatenated iterator', () => {
    const concatenated = {
      type: 'array',
      items: { type: 'string' },
      'x-cog-array-type': 'iterator',
      'x-cog-array-display': 'concatenate',
    };
    expect(isConcatenatedText(concatenated)).toBe(true);
    expect(shapeOutput(['Hel', 'lo'], concatenated)).toEqual({ value: 'Hello', files: [], text: true });
    // A plain iterator (no display hint) stays a list.
    const iterator = { type: 'array', items: { type: 'string' }, 'x-cog-array-type': 'iterator' };
    expect(isConcatenatedText(iterator)).toBe(false);
    expect(shapeOutput(['Hel', 'lo'], iterator).value).toEqual(['Hel', 'lo']);
  });

  it('takes files out of objects and nested lists, in order, leaving their places', () => {
    const schema = {
      type: 'object',
      properties: {
        images: { type: 'array', items: { type: 'string', format: 'uri' } },
        seed: { type: 'integer' },
        caption: { type: 'string' },
        nested: { type: 'object', properties: { mask: { type: 'string', format: 'uri' } } },
      },
    };
    const shaped = shapeOutput(
      {
        images: [PNG_URI, 'https://backend.internal/out/1.png'],
        seed: 1,
        caption: 'https://example.com/read-more',
        nested: { mask: 'https://backend.internal/out/mask.png' },
      },
      schema,
    );
    expect(shaped.value).toEqual({
      images: [null, null],
      seed: 1,
      caption: 'https://example.com/read-more',
      nested: { mask: null },
    });
    expect(shaped.files.map((f) => f.path)).toEqual([
      ['images', 0],
      ['images', 1],
      ['nested', 'mask'],
    ]);
    expect(shaped.files.map((f) => f.file.kind)).toEqual(['bytes', 'url', 'url']);
    expect(shaped.files[0]?.file).toMatchObject({ name: 'output_0.png', contentType: 'image/png' });
  });

  it('reads the places of files through Cog’s $refs (an output model) and anyOf', () => {
    const { output } = schemasFromCogOpenApi({
      components: {
        schemas: {
          Input: { type: 'object', properties: {} },
          Output: { $ref: '#/components/schemas/ModelOutput' },
          ModelOutput: {
            title: 'ModelOutput',
            type: 'object',
            properties: {
              file: { anyOf: [{ type: 'string', format: 'uri' }, { type: 'null' }] },
              text: { type: 'string' },
            },
          },
        },
      },
    });
    const shaped = shapeOutput({ file: 'https://b.internal/x.wav', text: 'https://b.internal/y' }, output);
    expect(shaped.value).toEqual({ file: null, text: 'https://b.internal/y' });
    expect(shaped.files).toEqual([
      { path: ['file'], file: { kind: 'url', url: 'https://b.internal/x.wav' } },
    ]);
  });

  it('treats a URL as a file where no schema speaks for its place, and data: URIs always', () => {
    expect(shapeOutput('https://b.internal/out.png', undefined).files).toHaveLength(1);
    expect(shapeOutput({ anything: 'https://b.internal/out.png' }, { type: 'object' }).files).toHaveLength(1);
    expect(shapeOutput(PNG_URI, { type: 'string' }).files).toHaveLength(1);
    expect(shapeOutput('plain words', undefined)).toEqual({ value: 'plain words', files: [] });
  });

  it('applies a backend’s text scrubbing and URL credentials', () => {
    const shaped = shapeOutput(['key sk-1 leaked', 'https://cdn/x.png'], undefined, {
      text: (t) => t.replace('sk-1', '[redacted]'),
      urlFile: (url) => ({ kind: 'url', url, headers: { authorization: 'Bearer t' } }),
    });
    expect(shaped.value).toEqual(['key [redacted] leaked', null]);
    expect(shaped.files[0]?.file).toEqual({
      kind: 'url',
      url: 'https://cdn/x.png',
      headers: { authorization: 'Bearer t' },
    });
  });
});

describe('shared backend helpers', () => {
  it('names a JPEG .jpg, whatever spelling the type has, and unknown types .bin', () => {
    expect(extensionFor('image/jpeg')).toBe('jpg');
    expect(extensionFor('IMAGE/JPEG; charset=binary')).toBe('jpg');
    expect(dataUriFile('data:image/jpeg;base64,/9j/4AAQ', 3)).toMatchObject({ name: 'output_3.jpg' });
    expect(extensionFor('application/x-unknown')).toBe('bin');
  });

  it('parses base64 and percent-encoded data: URIs and refuses malformed ones', () => {
    expect(parseDataUri('data:text/plain,hi%20there')).toEqual({
      data: Buffer.from('hi there'),
      contentType: 'text/plain',
    });
    expect(parseDataUri('data:;base64,aGk=')).toEqual({ data: Buffer.from('hi'), contentType: 'text/plain' });
    expect(parseDataUri('data:image/png;base64')).toBeUndefined();
    expect(parseDataUri('https://x')).toBeUndefined();
  });

  it('reads the last percentage of tqdm bars and progress lines, nothing else', () => {
    expect(lastPercentage(' 45%|████▌     | 45/100 [00:02<00:02]\r 46%|████▌     | 46/100')).toBe(46);
    expect(lastPercentage('progress: 12.5%\n')).toBe(12.5);
    expect(lastPercentage('using 50% of VRAM')).toBeUndefined();
  });
});
