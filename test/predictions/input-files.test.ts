import { describe, expect, it } from 'vitest';
import { checkFileInputs, dataUriSize, fileFields } from '../../src/predictions/input-files.js';
import { compileInputSchema } from '../../src/predictions/input-schema.js';

describe('dataUriSize: the decoded bytes of a data: URI', () => {
  it.each([
    ['base64', 'data:image/png;base64,iVBORw0KGgo=', 8],
    ['percent-encoded bytes count one each', 'data:text/plain,%E2%82%AC', 3],
    ['other characters count their UTF-8 bytes', 'data:text/plain,€€', 6],
    ['a malformed escape counts as written, without throwing', 'data:text/plain,%E0%A4%A', 4],
    ['no comma', 'data:text/plain', 0],
  ])('%s', (_, uri, bytes) => {
    expect(dataUriSize(uri)).toBe(bytes);
  });

  it('holds a percent-encoded file to the byte limit (it counted characters, a third of the bytes)', () => {
    const uri = `data:text/plain,${'%E2%82%AC'.repeat(400)}`;
    const policy = { maxBytes: 1000, allowPrivate: false };
    expect(checkFileInputs({ image: uri }, ['image'], policy).map((e) => e.field)).toEqual(['image']);
    expect(checkFileInputs({ image: 'data:text/plain,%E0%A4%A' }, ['image'], policy)).toEqual([]);
  });
});

describe('fileFields: every shape a file input is published in', () => {
  const uri = { type: 'string', format: 'uri' };
  it.each([
    ['Path', uri],
    ['list[Path]', { type: 'array', items: uri }],
    ['Optional[Path], pydantic v2', { anyOf: [uri, { type: 'null' }], default: null }],
    [
      'Optional[list[Path]], pydantic v2 and the Rust server',
      { anyOf: [{ type: 'array', items: uri }, { type: 'null' }], default: null },
    ],
    ['list of Optional[Path]', { type: 'array', items: { anyOf: [uri, { type: 'null' }] } }],
    ['nested allOf/oneOf', { allOf: [{ oneOf: [{ anyOf: [{ type: 'array', items: uri }] }] }] }],
    ['a tuple', { type: 'array', items: [{ type: 'string' }, uri] }],
    ['prefixItems', { type: 'array', prefixItems: [uri] }],
    [
      'nullable without type, after the dialect rewrite',
      // biome-ignore lint/suspicious/noThenProperty: JSON Schema keyword
      { if: { not: { type: 'null' } }, then: { type: 'array', items: uri } },
    ],
  ])('%s', (_, schema) => {
    expect(fileFields({ file: schema, text: { type: 'string' } })).toEqual(['file']);
  });

  it('an optional list of files is held to the SSRF rules and the size limit', () => {
    const validator = compileInputSchema({
      type: 'object',
      properties: {
        images: { anyOf: [{ type: 'array', items: { type: 'string', format: 'uri' } }, { type: 'null' }] },
      },
    });
    const policy = { maxBytes: 4, allowPrivate: false };
    const input = { images: ['http://169.254.169.254/latest/meta-data', 'data:text/plain,hello'] };
    expect(checkFileInputs(input, validator.fileFields, policy).map((e) => e.field)).toEqual([
      'images[0]',
      'images[1]',
    ]);
  });
});
