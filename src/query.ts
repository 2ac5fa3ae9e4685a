import { parse } from 'node:querystring';
import { GantryError } from './errors.js';

/**
 * fastify's `querystringParser`. Every query parameter Gantry reads is a single value; node's parser
 * returns an array for a repeated one (`?fields=a&fields=b`), which no route expects, so
 * repeatedParameter() refuses it before a route runs. The object has no prototype.
 */
export function parseQuery(text: string): Record<string, string | string[] | undefined> {
  return text.length === 0 ? Object.create(null) : parse(text);
}

/** 400 INVALID_PARAMETER naming the first query parameter given more than once, or undefined. */
export function repeatedParameter(query: unknown): GantryError | undefined {
  if (typeof query !== 'object' || query === null) return undefined;
  const values = query as Record<string, unknown>;
  for (const name in values) {
    if (Array.isArray(values[name])) {
      return new GantryError('INVALID_PARAMETER', {
        param: name,
        message: `The query parameter ${name} is given more than once`,
        details: name,
      });
    }
  }
  return undefined;
}
