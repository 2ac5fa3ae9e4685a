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

  it('carries the safety flags as one comma-separated field and the action; leaves both out when off', () => {
    const flagged = makeRecord({ safety_flags: ['pii', 'violence'], safety_action: 'redacted' });
    const fields = toStreamFields(flagged);
    expect(fields[fields.indexOf('safety_flags') + 1]).toBe('pii,violence');
    expect(fields[fields.indexOf('safety_action') + 1]).toBe('redacted');
    expect(fromStreamFields(fields)).toEqual(flagged);

    const off = makeRecord({ safety_flags: [], safety_action: null });
    const offFields = toStreamFields(off);
    expect(offFields).not.toContain('safety_flags');
    expect(offFields).not.toContain('safety_action');
    expect(fromStreamFields(offFields)).toEqual(off);
  });

  it('reads an entry an older Gantry wrote, without safety fields, as no flags and no action', () => {
    const record = makeRecord({ safety_flags: [], safety_action: null });
    const fields = toStreamFields({ ...record, safety_flags: ['hate'], safety_action: 'annotated' });
    fields.splice(fields.indexOf('safety_flags'), 2);
    fields.splice(fields.indexOf('safety_action'), 2);
    expect(fromStreamFields(fields)).toEqual(record);
  });
});
