/**
 * Credits in the admin API (README, "Admin API"): an account's balance and movements (its owner may read
 * them), and grants (an operator's; a negative amount corrects).
 */
import type { FastifyInstance } from 'fastify';
import type { Gantry } from '../context.js';
import {
  ACCOUNT_ID_PARAMS,
  audit,
  balanceOf,
  bodyOf,
  invalidParameter,
  listSchema,
  readLimit,
  routeSchema,
  visibleAccount,
} from './records.js';
import { ADMIN_PREFIX, scopeOf } from './routes.js';
import { requireOperator } from './scope.js';

const TAGS = ['admin'];
/** The largest grant in one call: a typo's extra zeros are refused rather than granted. */
const MAX_GRANT = 1_000_000_000;
const MAX_NOTE = 200;

const BALANCE = {
  type: 'object',
  properties: { balance: { type: ['number', 'null'], description: 'null: unlimited' } },
} as const;

export function registerCreditRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.get<{ Params: { id: string } }>(
    `${ADMIN_PREFIX}/accounts/:id/credits`,
    {
      schema: routeSchema({
        summary: "An account's credit balance",
        tags: TAGS,
        params: ACCOUNT_ID_PARAMS,
        response: { 200: BALANCE },
      }),
    },
    async (request) => {
      const account = visibleAccount(gantry, scopeOf(request), request.params.id);
      return { balance: await balanceOf(gantry, account.id) };
    },
  );

  app.post<{ Params: { id: string } }>(
    `${ADMIN_PREFIX}/accounts/:id/credits`,
    {
      schema: routeSchema({
        summary: 'Grant credits (a negative amount corrects)',
        tags: TAGS,
        params: ACCOUNT_ID_PARAMS,
        body: {
          type: 'object',
          required: ['amount'],
          properties: {
            amount: { type: 'number', description: 'Credits; negative for a correction' },
            note: { type: 'string', maxLength: MAX_NOTE },
          },
        },
        response: { 200: BALANCE },
      }),
    },
    async (request) => {
      const scope = scopeOf(request);
      const account = visibleAccount(gantry, scope, request.params.id);
      requireOperator(scope);
      const body = bodyOf(request);
      const amount = body.amount;
      if (
        typeof amount !== 'number' ||
        !Number.isFinite(amount) ||
        amount === 0 ||
        Math.abs(amount) > MAX_GRANT
      ) {
        throw invalidParameter(
          'amount',
          `amount must be a non-zero number of credits, at most ${MAX_GRANT} either way`,
        );
      }
      if (body.note !== undefined && (typeof body.note !== 'string' || body.note.length > MAX_NOTE)) {
        throw invalidParameter('note', `note must be a string of at most ${MAX_NOTE} characters`);
      }
      const note = typeof body.note === 'string' ? body.note : '';
      const after = await gantry.services.credits.grant(account.id, amount, note);
      const balance = after === Number.POSITIVE_INFINITY ? null : after;
      // The note is free text: it stays in the credit ledger, not in the audit log.
      await audit(gantry, request, scope, {
        action: 'credits.grant',
        accountId: account.id,
        target: account.id,
        details: { amount, balance },
      });
      return { balance };
    },
  );

  app.get<{ Params: { id: string }; Querystring: Record<string, string | undefined> }>(
    `${ADMIN_PREFIX}/accounts/:id/credits/movements`,
    {
      schema: routeSchema({
        summary: "An account's latest credit movements, newest first",
        tags: TAGS,
        params: ACCOUNT_ID_PARAMS,
        querystring: {
          type: 'object',
          properties: { limit: { type: 'integer', minimum: 1, maximum: 1000, default: 50 } },
        },
        response: {
          200: listSchema({
            type: 'object',
            properties: {
              at: { type: 'string', format: 'date-time' },
              amount: { type: 'number' },
              kind: { type: 'string', enum: ['grant', 'debit'] },
              note: { type: ['string', 'null'] },
              balance_after: { type: ['number', 'null'] },
            },
          }),
        },
      }),
    },
    async (request) => {
      const account = visibleAccount(gantry, scopeOf(request), request.params.id);
      const limit = readLimit(request.query.limit, 'limit', 50, 1000);
      const movements = await gantry.services.credits.movements(account.id, limit);
      return {
        data: movements.map((m) => ({
          at: m.at,
          amount: m.amount,
          kind: m.kind,
          note: m.note || null,
          balance_after: m.balanceAfter,
        })),
      };
    },
  );
}
