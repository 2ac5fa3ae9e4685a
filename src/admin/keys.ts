/**
 * API keys in the admin API (README, "Admin API"): listed with their last use, created (the key is in the
 * creation's answer only; Gantry keeps its SHA-256; a name the config gives a key of the account is
 * refused), revoked. In distributed mode a new key is relayed to every instance and a revocation refused
 * everywhere as soon as it is heard (auth/changes.ts).
 */
import type { FastifyInstance } from 'fastify';
import { generateKey, hashKey, keyPrefix } from '../auth/keys.js';
import { isConfigKeyName } from '../bootstrap.js';
import type { Gantry } from '../context.js';
import { GantryError } from '../errors.js';
import type { ApiKeyRecord } from '../store/types.js';
import {
  ACCOUNT_ID_PARAMS,
  audit,
  bodyOf,
  KEY_SCHEMA,
  keyView,
  readName,
  routeSchema,
  visibleAccount,
} from './records.js';
import { ADMIN_PREFIX, scopeOf } from './routes.js';

const TAGS = ['admin'];

export function registerKeyRoutes(app: FastifyInstance, gantry: Gantry): void {
  app.get<{ Params: { id: string } }>(
    `${ADMIN_PREFIX}/accounts/:id/keys`,
    {
      schema: routeSchema({
        summary: "An account's API keys, with their last use on any instance",
        tags: TAGS,
        params: ACCOUNT_ID_PARAMS,
        response: { 200: { type: 'object', properties: { data: { type: 'array', items: KEY_SCHEMA } } } },
      }),
    },
    async (request) => {
      const account = visibleAccount(gantry, scopeOf(request), request.params.id);
      // Uses not flushed yet (the Authenticator writes them every few seconds) are not shown.
      const keys = gantry.store.listKeys(account.id);
      const shared = await gantry.services.access.lastUsed(keys.map((k) => k.id));
      return { data: keys.map((k) => keyView(withLastUse(k, shared.get(k.id)))) };
    },
  );

  app.post<{ Params: { id: string } }>(
    `${ADMIN_PREFIX}/accounts/:id/keys`,
    {
      schema: routeSchema({
        summary: 'Create an API key (shown once, in this answer)',
        tags: TAGS,
        params: ACCOUNT_ID_PARAMS,
        body: {
          type: 'object',
          required: ['name'],
          properties: { name: { type: 'string', minLength: 1, maxLength: 64 } },
        },
        response: {
          201: {
            type: 'object',
            properties: {
              ...KEY_SCHEMA.properties,
              key: { type: 'string', description: 'The key itself: only in this answer, never again' },
            },
          },
        },
      }),
    },
    async (request, reply) => {
      const scope = scopeOf(request);
      const account = visibleAccount(gantry, scope, request.params.id);
      const name = readName(bodyOf(request).name, 'name');
      if (isConfigKeyName(gantry.config, account.name, name)) {
        throw new GantryError('CONFLICT', {
          message: `A key named ${JSON.stringify(name)} is declared for this account in the config`,
          param: 'name',
          details: 'Choose another name: the names of the keys in the config are reserved.',
        });
      }
      const key = generateKey();
      const hash = hashKey(key);
      const record = gantry.store.addKey(account.id, name, hash, keyPrefix(key));
      await gantry.services.access.keyCreated(record, hash);
      await audit(gantry, request, scope, {
        action: 'key.create',
        accountId: account.id,
        target: record.id,
        details: { name },
      });
      reply.code(201);
      reply.header('cache-control', 'no-store');
      return { ...keyView(record), key };
    },
  );

  app.delete<{ Params: { id: string } }>(
    `${ADMIN_PREFIX}/keys/:id`,
    {
      schema: routeSchema({
        summary: 'Revoke an API key (refused at once on every instance)',
        tags: TAGS,
        params: { type: 'object', required: ['id'], properties: { id: { type: 'string' } } },
        response: { 200: KEY_SCHEMA },
      }),
    },
    async (request) => {
      const scope = scopeOf(request);
      const found = gantry.store.getKey(request.params.id);
      // Another account's key answers as a key that does not exist.
      if (!found || (scope.role === 'owner' && found.accountId !== scope.account.id)) {
        throw new GantryError('NOT_FOUND', { message: 'Key not found' });
      }
      // Revoking twice changes nothing and records nothing.
      if (found.revokedAt !== null) return keyView(found);
      gantry.store.revokeKey(found.id);
      const hash = gantry.store.keyHash(found.id);
      if (hash !== undefined) await gantry.services.access.keyRevoked(hash);
      await audit(gantry, request, scope, {
        action: 'key.revoke',
        accountId: found.accountId,
        target: found.id,
        details: { name: found.name },
      });
      return keyView(gantry.store.getKey(found.id) as ApiKeyRecord);
    },
  );
}

/** The later of this instance's last use and the one shared by every instance. */
function withLastUse(key: ApiKeyRecord, shared: string | undefined): ApiKeyRecord {
  if (shared === undefined || (key.lastUsedAt !== null && key.lastUsedAt >= shared)) return key;
  return { ...key, lastUsedAt: shared };
}
