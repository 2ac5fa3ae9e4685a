/**
 * What the admin API's account, key and credit routes share: the answer shapes (snake_case, ISO times),
 * input checks that name the field, and the audit entry every change writes.
 */
import type { FastifyRequest, FastifySchema } from 'fastify';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import type { Account, ApiKeyRecord } from '../store/types.js';
import type { Scope } from './scope.js';

export const ACCOUNT_SCHEMA = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    name: { type: 'string' },
    tier: { type: 'string' },
    status: { type: 'string', enum: ['active', 'suspended'] },
    created_at: { type: 'string', format: 'date-time' },
  },
} as const;

export const KEY_SCHEMA = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    account_id: { type: 'string' },
    name: { type: 'string' },
    prefix: { type: 'string', description: 'The first characters of the key: enough to tell keys apart.' },
    created_at: { type: 'string', format: 'date-time' },
    revoked_at: { type: ['string', 'null'], format: 'date-time' },
    last_used_at: { type: ['string', 'null'], format: 'date-time' },
  },
} as const;

export const ERROR_SCHEMA = { type: 'object', properties: { error: { type: 'object' } } } as const;

export const ACCOUNT_ID_PARAMS = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string', description: 'Account id (acct_…)' } },
} as const;

export function accountView(a: Account) {
  return { id: a.id, name: a.name, tier: a.tier, status: a.status, created_at: a.createdAt };
}

export function keyView(k: ApiKeyRecord) {
  return {
    id: k.id,
    account_id: k.accountId,
    name: k.name,
    prefix: k.prefix,
    created_at: k.createdAt,
    revoked_at: k.revokedAt,
    last_used_at: k.lastUsedAt,
  };
}

/** The account, when the caller may see it; NOT_FOUND otherwise (an owner's other accounts do not exist). */
export function visibleAccount(gantry: Gantry, scope: Scope, id: string): Account {
  if (scope.role === 'owner' && scope.account.id !== id) {
    throw new GantryError('NOT_FOUND', { message: 'Account not found' });
  }
  const account = gantry.store.getAccount(id);
  if (!account) throw new GantryError('NOT_FOUND', { message: 'Account not found' });
  return account;
}

/** The JSON body as an object, or INVALID_REQUEST. */
export function bodyOf(request: FastifyRequest): Record<string, unknown> {
  const body = request.body;
  if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new GantryError('INVALID_REQUEST', { message: 'The body must be a JSON object' });
  }
  return body as Record<string, unknown>;
}

/** A display name: 1 to 64 characters, no control characters. */
export function readName(value: unknown, param: string): string {
  if (
    typeof value !== 'string' ||
    value.trim().length === 0 ||
    value.length > 64 ||
    // biome-ignore lint/suspicious/noControlCharactersInRegex: refusing them is the point
    /[\u0000-\u001f\u007f]/.test(value)
  ) {
    throw invalidParameter(
      param,
      `${param} must be a string of 1 to 64 characters, without control characters`,
    );
  }
  return value.trim();
}

/** An integer query parameter from min to max, or the fallback when absent. */
export function readLimit(raw: unknown, param: string, fallback: number, max: number): number {
  if (raw === undefined || raw === '') return fallback;
  if (typeof raw !== 'string' || !/^\d{1,6}$/.test(raw) || Number(raw) < 1 || Number(raw) > max) {
    throw invalidParameter(param, `${param} must be an integer from 1 to ${max}`);
  }
  return Number(raw);
}

/** A string query parameter, or undefined when absent or empty. */
export function readQueryString(raw: unknown, param: string, max = 200): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string' || raw.length > max) {
    throw invalidParameter(param, `${param} must be a string`);
  }
  return raw;
}

/**
 * Writes the change's audit entry. The change is made already: a log that cannot be written is logged as
 * an error (without the details) rather than answered as a failure the caller would retry.
 */
export async function audit(
  gantry: Gantry,
  request: FastifyRequest,
  scope: Scope,
  entry: { action: string; accountId: string | null; target: string; details?: Record<string, unknown> },
): Promise<void> {
  try {
    await gantry.plane.audit.record({
      actor: scope.actor,
      action: entry.action,
      accountId: entry.accountId,
      target: entry.target,
      details: entry.details ?? {},
    });
  } catch (error) {
    request.log.error(
      { err: (error as Error).message, action: entry.action, target: entry.target },
      'the audit log could not be written',
    );
  }
}

/** A balance as answered: null for unlimited. */
export async function balanceOf(gantry: Gantry, accountId: string): Promise<number | null> {
  const balance = await gantry.services.credits.balance(accountId);
  return balance === Number.POSITIVE_INFINITY ? null : balance;
}

/** A list answer's schema, `{ data: [item, …] }`, with any further top-level fields (a paging cursor). */
export function listSchema(items: object, more: Record<string, object> = {}): object {
  return { type: 'object', properties: { data: { type: 'array', items }, ...more } };
}

/** A route's schema: it documents the route (the OpenAPI document); handlers check their input themselves. */
export interface RouteDoc {
  summary: string;
  tags: string[];
  params?: object;
  querystring?: object;
  body?: object;
  response: Record<number, object>;
}

export function routeSchema(doc: RouteDoc): FastifySchema {
  return doc as FastifySchema;
}

/** 400 INVALID_PARAMETER naming the field: as `param`, and as `details` (what the REST envelope shows). */
export function invalidParameter(param: string, message: string): GantryError {
  return new GantryError('INVALID_PARAMETER', { param, message, details: param });
}
