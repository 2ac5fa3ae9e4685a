import { describe, expect, it } from 'vitest';
import { newUsageId, usageTime } from '../../src/usage/id.js';

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('newUsageId', () => {
  it('is a UUIDv7 whose first 48 bits are the time in milliseconds', () => {
    const now = Date.UTC(2026, 10, 21, 12, 0, 0, 123);
    const id = newUsageId(now);
    expect(id).toMatch(UUID_V7);
    expect(Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16)).toBe(now);
  });

  it('sorts in creation order, within one millisecond too, and never repeats', () => {
    const ids: string[] = [];
    const start = Date.now();
    for (let ms = start; ms < start + 5; ms++) for (let i = 0; i < 1000; i++) ids.push(newUsageId(ms));
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
    for (const id of ids) expect(id).toMatch(UUID_V7);
  });
});

describe('usageTime', () => {
  it('is the ISO 8601 time of the millisecond given, the same text within one millisecond', () => {
    const ms = Date.UTC(2026, 10, 22, 3, 4, 5, 678);
    expect(usageTime(ms)).toBe('2026-11-22T03:04:05.678Z');
    expect(usageTime(ms)).toBe(usageTime(ms));
    expect(usageTime(ms + 1)).toBe('2026-11-22T03:04:05.679Z');
    expect(usageTime(ms)).toBe('2026-11-22T03:04:05.678Z');
  });

  it('writes what toISOString writes, across seconds, minutes and years', () => {
    const starts = [Date.UTC(2026, 11, 31, 23, 59, 59, 990), Date.UTC(2024, 1, 29, 0, 0, 0, 0), 1, 999, 1000];
    for (const start of starts) {
      for (let ms = start; ms < start + 25; ms++) expect(usageTime(ms)).toBe(new Date(ms).toISOString());
    }
    for (let i = 0; i < 2000; i++) {
      const ms = Math.floor(Math.random() * 4_000_000_000_000);
      expect(usageTime(ms)).toBe(new Date(ms).toISOString());
    }
  });
});
