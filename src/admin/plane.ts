/**
 * The control plane behind the web surfaces (README, "Admin API", "Console", "Status page"): who may call
 * the admin API, the audit log, usage queries, incidents, model status overrides and e-mail subscribers,
 * each kept in the mode's store (SQLite in embedded mode, Redis in distributed mode).
 */
import { Redis } from 'ioredis';
import type { Catalog } from '../catalog.js';
import type { GantryConfig } from '../config/types.js';
import { reconnectBackoff } from '../limits/redis-client.js';
import type { Metrics } from '../metrics.js';
import type { Routing } from '../routing/router.js';
import { createIncidents, type Incidents } from '../status/incidents.js';
import { createModelOverrides, type ModelOverrides } from '../status/overrides.js';
import { createSubscriptions, type Subscriptions } from '../status/subscriptions.js';
import type { SqliteStore } from '../store/sqlite.js';
import { createUsageQuery, type UsageQuery } from '../usage/query.js';
import { type AuditLog, createAuditLog } from './audit.js';
import { AdminAuth } from './scope.js';
import { SessionSigner } from './session.js';

export interface PlaneLog {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  debug(obj: object, msg?: string): void;
}

/** What the control plane's parts are built from. */
export interface PlaneDeps {
  config: GantryConfig;
  /** Embedded mode's tables live in its database (store.handle). */
  store: SqliteStore;
  /** Distributed mode: the plane's own patient connection (never on the request path); else undefined. */
  redis: Redis | undefined;
  catalog: Catalog;
  routing: Routing;
  metrics: Metrics;
  log: PlaneLog;
  /** The origin of links Gantry hands out (mails, the feed). */
  publicUrl: () => string;
}

export interface ControlPlane {
  auth: AdminAuth;
  audit: AuditLog;
  usage: UsageQuery;
  incidents: Incidents;
  overrides: ModelOverrides;
  subscriptions: Subscriptions;
  close(): Promise<void>;
}

export function createControlPlane(base: Omit<PlaneDeps, 'redis'>, secretKey: Buffer): ControlPlane {
  const { config, log } = base;
  let redis: Redis | undefined;
  if (config.redisUrl) {
    redis = new Redis(config.redisUrl, {
      maxRetriesPerRequest: 1,
      commandTimeout: 5_000,
      retryStrategy: reconnectBackoff(1_000),
    });
    redis.on('error', (error: Error) => log.debug({ err: error.message }, 'control plane redis error'));
  }
  const deps: PlaneDeps = { ...base, redis };
  const incidents = createIncidents(deps);
  const subscriptions = createSubscriptions(deps, secretKey);
  incidents.onEvent((event) => subscriptions.notify(event));
  const plane: ControlPlane = {
    auth: new AdminAuth(config.web.adminKeys, new SessionSigner(secretKey), base.store),
    audit: createAuditLog(deps),
    usage: createUsageQuery(deps),
    incidents,
    overrides: createModelOverrides(deps),
    subscriptions,
    async close() {
      await Promise.allSettled([
        plane.audit.close(),
        plane.usage.close(),
        incidents.close(),
        plane.overrides.close(),
        subscriptions.close(),
      ]);
      redis?.disconnect();
    },
  };
  return plane;
}
