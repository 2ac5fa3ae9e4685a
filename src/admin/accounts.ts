/**
 * Accounts in the admin API (README, "Admin API"): an operator lists, creates, suspends and moves accounts
 * between tiers; an owner sees only its own account. A change made here is relayed to every instance in
 * distributed mode (auth/changes.ts).
 */
import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import type { Account } from '../store/types.js';
import {
  ACCOUNT_ID_PARAMS,
  ACCOUNT_SCHEMA,
  accountView,
  audit,
  balanceOf,
  bodyOf,
  invalidParameter,
  readName,
  routeSchema,
  visibleAccount,
} from './records.js';
import { ADMIN_PREFIX, scopeOf } from './routes.js';
import { requireOperator } from './scope.js';

const TAGS = ['admin'];

export function registerAccountRoutes(app: FastifyInstance, gantry: Gantry): void {
  const readTier = (value: unknown): string => {
    if (typeof value !== 'string' || !(value in gantry.config.tiers)) {
      throw invalidParameter(
        'tier',
        `tier must be one of the configured tiers: ${Object.keys(gantry.config.tiers).join(', ')}`,
      );
    }
    return value;
  };

  app.get(
    `${ADMIN_PREFIX}/accounts`,
    {
      schema: routeSchema({
        summary: 'List accounts (an owner: its own)',
        tags: TAGS,
        response: { 200: { type: 'object', properties: { data: { type: 'array', items: ACCOUNT_SCHEMA } } } },
      }),
    },
    async (request) => {
      const scope = scopeOf(request);
      const accounts =
        scope.role === 'owner'
          ? [gantry.store.getAccount(scope.account.id)].filter((a): a is Account => a !== undefined)
          : gantry.store.listAccounts();
      return { data: accounts.map(accountView) };
    },
  );

  app.post(
    `${ADMIN_PREFIX}/accounts`,
    {
      schema: routeSchema({
        summary: 'Create an account',
        tags: TAGS,
        body: {
          type: 'object',
          required: ['name'],
          properties: {
            name: { type: 'string', minLength: 1, maxLength: 64 },
            tier: { type: 'string', description: 'A configured tier; default: the first one' },
          },
        },
        response: { 201: ACCOUNT_SCHEMA },
      }),
    },
    async (request, reply) => {
      const scope = scopeOf(request);
      requireOperator(scope);
      const body = bodyOf(request);
      const name = readName(body.name, 'name');
      const tier =
        body.tier === undefined ? (Object.keys(gantry.config.tiers)[0] ?? 'default') : readTier(body.tier);
      if (gantry.store.getAccountByName(name)) {
        throw new GantryError('CONFLICT', { message: `An account named ${JSON.stringify(name)} exists` });
      }
      const account = gantry.store.upsertAccount(name, tier, 'active');
      await gantry.services.access.accountChanged(account);
      await audit(gantry, request, scope, {
        action: 'account.create',
        accountId: account.id,
        target: account.id,
        details: { name, tier },
      });
      reply.code(201);
      return accountView(account);
    },
  );

  app.get<{ Params: { id: string } }>(
    `${ADMIN_PREFIX}/accounts/:id`,
    {
      schema: routeSchema({
        summary: 'One account, with its credit balance',
        tags: TAGS,
        params: ACCOUNT_ID_PARAMS,
        response: {
          200: {
            type: 'object',
            properties: {
              ...ACCOUNT_SCHEMA.properties,
              balance: { type: ['number', 'null'], description: 'null: unlimited' },
            },
          },
        },
      }),
    },
    async (request) => {
      const account = visibleAccount(gantry, scopeOf(request), request.params.id);
      return { ...accountView(account), balance: await balanceOf(gantry, account.id) };
    },
  );

  app.patch<{ Params: { id: string } }>(
    `${ADMIN_PREFIX}/accounts/:id`,
    {
      schema: routeSchema({
        summary: 'Suspend or reactivate an account, or move it to another tier',
        tags: TAGS,
        params: ACCOUNT_ID_PARAMS,
        body: {
          type: 'object',
          properties: {
            status: { type: 'string', enum: ['active', 'suspended'] },
            tier: { type: 'string' },
          },
        },
        response: { 200: ACCOUNT_SCHEMA },
      }),
    },
    async (request) => {
      const scope = scopeOf(request);
      const account = visibleAccount(gantry, scope, request.params.id);
      requireOperator(scope);
      const body = bodyOf(request);
      const changes: { status?: Account['status']; tier?: string } = {};
      if (body.status !== undefined) {
        if (body.status !== 'active' && body.status !== 'suspended') {
          throw invalidParameter('status', 'status must be "active" or "suspended"');
        }
        if (body.status !== account.status) changes.status = body.status;
      }
      if (body.tier !== undefined) {
        const tier = readTier(body.tier);
        if (tier !== account.tier) changes.tier = tier;
      }
      if (changes.status === undefined && changes.tier === undefined) return accountView(account);
      if (changes.status !== undefined) gantry.store.setAccountStatus(account.id, changes.status);
      if (changes.tier !== undefined) gantry.store.setAccountTier(account.id, changes.tier);
      const updated = gantry.store.getAccount(account.id) as Account;
      await gantry.services.access.accountChanged(updated);
      await audit(gantry, request, scope, {
        action: 'account.update',
        accountId: account.id,
        target: account.id,
        details: changes,
      });
      return accountView(updated);
    },
  );
}
