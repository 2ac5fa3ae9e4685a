import { describe, expect, it } from 'vitest';
import { fromStreamFields, toStreamFields } from '../../src/usage/redis-fields.js';
import { makeRecord } from './fixtures.js';

describe('usage records as Redis stream fields', () => {
  it('carries cache writes both ways', () => {
    const record = makeRecord({
      input_tokens: 2102,
      cached_input_tokens: 2000,
      cache_write_input_tokens: 100,
    });
    const fields = toStreamFields(record);
    expect(fields[fields.indexOf('cache_write_input_tokens') + 1]).toBe('100');
    expect(fromStreamFields(fields)).toEqual(record);
  });

  it('reads an entry an older Gantry wrote, without cache writes, as 0 of them', () => {
    const record = makeRecord({ cache_write_input_tokens: 0 });
    const fields = toStreamFields({ ...record, cache_write_input_tokens: 5 });
    const at = fields.indexOf('cache_write_input_tokens');
    fields.splice(at, 2);
    expect(fromStreamFields(fields)).toEqual(record);
  });
});
