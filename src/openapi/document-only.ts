import type { FastifyInstance } from 'fastify';

/**
 * Route schemas document the API (the OpenAPI document at /v1/openapi.json is built from them); handlers
 * check their input themselves, with the catalogue's errors, and answers are sent as they are: fastify
 * neither validates requests nor serializes answers by the schemas.
 */
export function schemasDocumentOnly(app: FastifyInstance): void {
  app.setValidatorCompiler(() => () => true);
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
}
