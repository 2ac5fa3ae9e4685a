import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';

/** STUB: the status page's e-mail subscription routes are added by their own change. */
export function registerSubscribeRoutes(_app: FastifyInstance, _gantry: Gantry): void {}
