import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';

/** STUB: GET /v1/openapi.json is added by its own change. */
export async function registerOpenApi(_app: FastifyInstance, _gantry: Gantry): Promise<void> {}
