/**
 * Incidents in the admin API (README, "Status page" → "Models and incidents"): everyone signed in reads
 * them; operators open, update and resolve them. They show on the public status page and its feed.
 */
import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import { INCIDENT_SCHEMA, incidentView } from '../status/incident-view.js';
import { INCIDENT_IMPACTS, type IncidentImpact, type IncidentStatus } from '../status/incidents.js';
import { API_ID, CONSOLE_ID } from '../status/snapshot.js';
import { audit, invalidParameter } from './records.js';
import { ADMIN_PREFIX, scopeOf } from './routes.js';
import { requireOperator } from './scope.js';

const OPEN_STATUSES = ['investigating', 'identified', 'monitoring'] as const;
type OpenStatus = (typeof OPEN_STATUSES)[number];
const MAX_TITLE = 200;
const MAX_MESSAGE = 5_000;
const MAX_COMPONENTS = 50;
const DEFAULT_LIMIT = 50;
const MAX_LIMIT = 500;

const ID_PARAMS = { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] } as const;
const LIST_SCHEMA = {
  type: 'object',
  properties: { data: { type: 'array', items: INCIDENT_SCHEMA } },
} as const;

type Body = Record<string, unknown>;

function bodyOf(request: { body: unknown }): Body {
  const body = request.body;
  if (body === undefined || body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body)) throw invalidParameter('body', 'send a JSON object');
  return body as Body;
}

function text(body: Body, field: string, max: number, required: boolean): string | undefined {
  const value = body[field];
  if (value === undefined && !required) return undefined;
  if (typeof value !== 'string' || value.trim() === '' || value.length > max) {
    throw invalidParameter(field, `${field} must be a string of 1 to ${max} characters`);
  }
  return value;
}

function openStatus(body: Body): OpenStatus | undefined {
  const value = body.status;
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !(OPEN_STATUSES as readonly string[]).includes(value)) {
    throw invalidParameter(
      'status',
      'status must be one of investigating, identified, monitoring (resolve with POST …/resolve)',
    );
  }
  return value as OpenStatus;
}

export function registerIncidentRoutes(app: FastifyInstance, gantry: Gantry): void {
  const incidents = gantry.plane.incidents;

  /** What an incident may name: the API, the console, and the models the public status page shows. */
  const components = (body: Body): string[] => {
    const value = body.components;
    const known = new Set([API_ID, CONSOLE_ID]);
    for (const m of gantry.catalog.all()) if (m.entry.accounts === undefined) known.add(m.entry.namespace);
    if (!Array.isArray(value) || value.length === 0 || value.length > MAX_COMPONENTS) {
      throw invalidParameter('components', `components must be a list of 1 to ${MAX_COMPONENTS} components`);
    }
    for (const c of value) {
      if (typeof c !== 'string' || !known.has(c)) {
        throw invalidParameter(
          'components',
          'each component is "api", "console" or the namespace of a public model',
        );
      }
    }
    return [...new Set(value as string[])];
  };

  app.get(
    `${ADMIN_PREFIX}/incidents`,
    {
      schema: {
        summary: 'List incidents, newest first (?open=true: only open ones)',
        tags: ['admin'],
        querystring: {
          type: 'object',
          properties: { open: { type: 'string', enum: ['true', 'false'] }, limit: { type: 'integer' } },
        },
        response: { 200: LIST_SCHEMA },
      },
    },
    async (request) => {
      scopeOf(request);
      const query = request.query as { open?: string; limit?: string };
      if (query.open !== undefined && query.open !== 'true' && query.open !== 'false') {
        throw invalidParameter('open', 'open must be true or false');
      }
      let limit = DEFAULT_LIMIT;
      if (query.limit !== undefined) {
        limit = Number(query.limit);
        if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
          throw invalidParameter('limit', `limit must be an integer from 1 to ${MAX_LIMIT}`);
        }
      }
      const list = await incidents.list({ open: query.open === 'true', limit });
      return { data: list.map(incidentView) };
    },
  );

  app.get(
    `${ADMIN_PREFIX}/incidents/:id`,
    {
      schema: {
        summary: 'One incident',
        tags: ['admin'],
        params: ID_PARAMS,
        response: { 200: INCIDENT_SCHEMA },
      },
    },
    async (request) => {
      scopeOf(request);
      const { id } = request.params as { id: string };
      const incident = await incidents.get(id);
      if (incident === undefined) {
        throw new GantryError('NOT_FOUND', { message: `Incident ${id} not found` });
      }
      return incidentView(incident);
    },
  );

  app.post(
    `${ADMIN_PREFIX}/incidents`,
    {
      schema: {
        summary: 'Open an incident (shown on the status page and in its feed)',
        tags: ['admin'],
        body: {
          type: 'object',
          required: ['title', 'components', 'impact', 'message'],
          properties: {
            title: { type: 'string', minLength: 1, maxLength: MAX_TITLE },
            components: { type: 'array', items: { type: 'string' }, minItems: 1 },
            impact: { type: 'string', enum: INCIDENT_IMPACTS },
            status: { type: 'string', enum: OPEN_STATUSES },
            message: { type: 'string', minLength: 1, maxLength: MAX_MESSAGE },
          },
        },
        response: { 201: INCIDENT_SCHEMA },
      },
    },
    async (request, reply) => {
      const scope = scopeOf(request);
      requireOperator(scope);
      const body = bodyOf(request);
      const title = text(body, 'title', MAX_TITLE, true) as string;
      const list = components(body);
      if (typeof body.impact !== 'string' || !(INCIDENT_IMPACTS as readonly string[]).includes(body.impact)) {
        throw invalidParameter('impact', 'impact must be one of degraded, offline, maintenance');
      }
      const status = openStatus(body);
      const message = text(body, 'message', MAX_MESSAGE, true) as string;
      const incident = await incidents.open({
        title,
        components: list,
        impact: body.impact as IncidentImpact,
        ...(status === undefined ? {} : { status }),
        message,
      });
      await audit(gantry, request, scope, {
        action: 'incident.open',
        accountId: null,
        target: incident.id,
        details: { title, components: list, impact: incident.impact, status: incident.status },
      });
      return reply.code(201).send(incidentView(incident));
    },
  );

  app.patch(
    `${ADMIN_PREFIX}/incidents/:id`,
    {
      schema: {
        summary: 'Post an update to an open incident (optionally a new status)',
        tags: ['admin'],
        params: ID_PARAMS,
        body: {
          type: 'object',
          required: ['message'],
          properties: {
            status: { type: 'string', enum: OPEN_STATUSES },
            message: { type: 'string', minLength: 1, maxLength: MAX_MESSAGE },
          },
        },
        response: { 200: INCIDENT_SCHEMA },
      },
    },
    async (request) => {
      const scope = scopeOf(request);
      requireOperator(scope);
      const { id } = request.params as { id: string };
      const body = bodyOf(request);
      const status: IncidentStatus | undefined = openStatus(body);
      const message = text(body, 'message', MAX_MESSAGE, true) as string;
      const incident = await incidents.update(id, { ...(status === undefined ? {} : { status }), message });
      await audit(gantry, request, scope, {
        action: 'incident.update',
        accountId: null,
        target: id,
        details: { status: incident.status },
      });
      return incidentView(incident);
    },
  );

  app.post(
    `${ADMIN_PREFIX}/incidents/:id/resolve`,
    {
      schema: {
        summary: 'Resolve an incident',
        tags: ['admin'],
        params: ID_PARAMS,
        body: {
          type: 'object',
          properties: { message: { type: 'string', minLength: 1, maxLength: MAX_MESSAGE } },
        },
        response: { 200: INCIDENT_SCHEMA },
      },
    },
    async (request) => {
      const scope = scopeOf(request);
      requireOperator(scope);
      const { id } = request.params as { id: string };
      const message = text(bodyOf(request), 'message', MAX_MESSAGE, false);
      const incident = await incidents.resolve(id, message);
      await audit(gantry, request, scope, {
        action: 'incident.resolve',
        accountId: null,
        target: id,
        details: { source: incident.source },
      });
      return incidentView(incident);
    },
  );
}
