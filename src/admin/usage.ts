/**
 * GET /admin/v1/usage (README, "Usage queries"): requests, tokens and cost per UTC day, account and model.
 * An operator sees any account or all of them; an owner only its own account, whatever it asks for.
 */
import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import { addDays, dayOf, isDay } from '../usage/query-days.js';
import { ADMIN_PREFIX, scopeOf } from './routes.js';
import { requireAccount } from './scope.js';

/** The range when none is asked for: the last 30 days, today included. */
const DEFAULT_DAYS = 30;
/** The longest range: the days the distributed mode keeps (redis-sink.ts, DEFAULT_DAY_TTL_SECONDS). */
export const MAX_USAGE_DAYS = 400;

const DAY_SCHEMA = { type: 'string', pattern: '^\\d{4}-\\d{2}-\\d{2}$' } as const;

const usageSchema = {
  summary: 'Usage per day, account and model',
  description:
    'Requests, input and output tokens and cost (credits) per UTC day, account and model; only the days ' +
    'with usage. An owner session always gets its own account. The range defaults to the last 30 days.',
  tags: ['admin'],
  querystring: {
    type: 'object',
    properties: {
      account: { type: 'string', description: 'An account id (operators: all accounts when absent)' },
      model: { type: 'string', description: 'A model namespace, e.g. gantry/local-chat' },
      from: {
        ...DAY_SCHEMA,
        description: 'First day, YYYY-MM-DD (UTC), inclusive; default 29 days before `to`',
      },
      to: { ...DAY_SCHEMA, description: 'Last day, YYYY-MM-DD (UTC), inclusive; default today' },
    },
  },
  response: {
    200: {
      type: 'object',
      required: ['data', 'from', 'to'],
      properties: {
        data: {
          type: 'array',
          items: {
            type: 'object',
            required: ['day', 'account_id', 'model', 'requests', 'input_tokens', 'output_tokens', 'cost'],
            properties: {
              day: DAY_SCHEMA,
              account_id: { type: 'string' },
              model: { type: 'string' },
              requests: { type: 'integer' },
              input_tokens: { type: 'integer' },
              output_tokens: { type: 'integer' },
              cost: { type: 'number', description: 'Credits charged' },
            },
          },
        },
        from: DAY_SCHEMA,
        to: DAY_SCHEMA,
      },
    },
  },
} as const;

export function registerUsageRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.get(`${ADMIN_PREFIX}/usage`, { schema: usageSchema }, async (request, reply) => {
    const scope = scopeOf(request);
    const query = (request.query ?? {}) as Record<string, unknown>;
    let accountId = text(query, 'account');
    const model = text(query, 'model');
    if (scope.role === 'owner') {
      if (accountId !== undefined) requireAccount(scope, accountId);
      accountId = scope.account.id;
    }
    const { from, to } = range(query);
    const days = await gantry.plane.usage.daily({
      from,
      to,
      ...(accountId === undefined ? {} : { accountId }),
      ...(model === undefined ? {} : { model }),
    });
    reply.header('cache-control', 'no-store');
    return {
      data: days.map((d) => ({
        day: d.day,
        account_id: d.accountId,
        model: d.model,
        requests: d.requests,
        input_tokens: d.inputTokens,
        output_tokens: d.outputTokens,
        cost: d.cost,
      })),
      from,
      to,
    };
  });
}

/** An optional non-empty string parameter (a repeated one is refused). */
function text(query: Record<string, unknown>, name: string): string | undefined {
  const value = query[name];
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string' || value.length > 256) {
    throw new GantryError('INVALID_PARAMETER', {
      param: name,
      message: `\`${name}\` must be one string of at most 256 characters`,
    });
  }
  return value;
}

/** `from` and `to` checked, with their defaults (the last 30 days, today in UTC included). */
function range(query: Record<string, unknown>): { from: string; to: string } {
  const day = (name: 'from' | 'to'): string | undefined => {
    const value = query[name];
    if (value === undefined || value === '') return undefined;
    if (typeof value !== 'string' || !isDay(value)) {
      throw new GantryError('INVALID_DATE_FORMAT', {
        param: name,
        message: `\`${name}\` must be a date written YYYY-MM-DD`,
        details: `${name}: a UTC calendar day such as ${dayOf(Date.now())}`,
      });
    }
    return value;
  };
  const givenFrom = day('from');
  const givenTo = day('to');
  const to = givenTo ?? (givenFrom === undefined ? dayOf(Date.now()) : maxDay(givenFrom, dayOf(Date.now())));
  const from = givenFrom ?? addDays(to, -(DEFAULT_DAYS - 1));
  if (from > to) {
    throw new GantryError('INVALID_DATE_RANGE', {
      param: 'from',
      details: `from ${from} is after to ${to}`,
    });
  }
  if (addDays(from, MAX_USAGE_DAYS - 1) < to) {
    throw new GantryError('INVALID_DATE_RANGE', {
      param: 'from',
      message: `A range spans at most ${MAX_USAGE_DAYS} days`,
      details: `from ${from} to ${to} is longer than ${MAX_USAGE_DAYS} days`,
    });
  }
  return { from, to };
}

function maxDay(a: string, b: string): string {
  return a > b ? a : b;
}
