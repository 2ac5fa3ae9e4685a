/**
 * Typed reads of a prediction input. Gantry validates inputs against the published schemas before a run,
 * so these checks only guard a backend called directly; their messages name the field, never its value
 * (an input may hold secrets).
 */
import type { JsonObject } from '../types.js';

/** A field that does not fit the model's schema. */
export class InputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InputError';
  }
}

export function readString(input: JsonObject, name: string, fallback?: string): string {
  const value = input[name] ?? fallback;
  if (typeof value !== 'string') throw new InputError(`input.${name} must be a string`);
  return value;
}

export function readOptionalInteger(
  input: JsonObject,
  name: string,
  bounds: { min: number; max: number },
): number | undefined {
  const value = input[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value))
    throw new InputError(`input.${name} must be an integer`);
  if (value < bounds.min || value > bounds.max) {
    throw new InputError(`input.${name} must be between ${bounds.min} and ${bounds.max}`);
  }
  return value;
}

export function readInteger(
  input: JsonObject,
  name: string,
  bounds: { min: number; max: number },
  fallback: number,
): number {
  return readOptionalInteger(input, name, bounds) ?? fallback;
}

export function readEnum<T extends string | number>(
  input: JsonObject,
  name: string,
  values: readonly T[],
  fallback: T | undefined,
): T {
  const value = input[name] ?? fallback;
  const match = values.find((allowed) => allowed === value);
  if (match === undefined) throw new InputError(`input.${name} must be one of ${values.join(', ')}`);
  return match;
}

export function readOptionalEnum<T extends string | number>(
  input: JsonObject,
  name: string,
  values: readonly T[],
): T | undefined {
  const value = input[name];
  return value === undefined || value === null ? undefined : readEnum(input, name, values, undefined);
}
