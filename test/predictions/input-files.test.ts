import { describe, expect, it } from 'vitest';
import { checkFileInputs, dataUriSize } from '../../src/predictions/input-files.js';

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
