/** What a Cog server's /openapi.json tells a run: the Output schema and whether predictions can be polled. */
import { schemasFromCogOpenApi } from '../cog-openapi.js';
import { isObject } from '../common.js';
import type { JsonObject } from '../types.js';

/** The Output schema with its `$ref`s inlined; undefined when the document has none usable. */
export function outputSchemaOf(doc: unknown): JsonObject | undefined {
  try {
    return schemasFromCogOpenApi(doc).output;
  } catch {
    return undefined;
  }
}

/** Cog itself has no GET /predictions/{id}; a server that lists one in its schema can be polled. */
export function supportsPolling(doc: unknown): boolean {
  if (!isObject(doc) || !isObject(doc.paths)) return false;
  const item = doc.paths['/predictions/{prediction_id}'];
  return isObject(item) && isObject(item.get);
}
