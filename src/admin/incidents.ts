import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';

/** STUB: the routes of this area are added by its own change. */
export function registerIncidentRoutes(_app: FastifyInstance, _gantry: Gantry): void {}
