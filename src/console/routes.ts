import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';

/** STUB: the console's pages and assets (/console) are added by their own change. */
export function registerConsoleRoutes(_app: FastifyInstance, _gantry: Gantry): void {}
