import type { JsonObject } from '../types.js';

export function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}
