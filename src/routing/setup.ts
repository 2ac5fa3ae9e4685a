import { Redis } from 'ioredis';
import type { ProviderConfig } from '../../providers/types.js';
import type { GantryConfig } from '../config/types.js';
import { reconnectBackoff } from '../limits/redis-client.js';
import type { Metrics } from '../metrics.js';
import type { SqliteStore } from '../store/sqlite.js';
import type { StatusHistory } from './history.js';
import { RedisStatusHistory } from './history-redis.js';
import { SqliteStatusHistory } from './history-sqlite.js';
import type { ProbeTarget } from './probes.js';
import { Routing, type RoutingLog } from './router.js';

/** Builds the routing of every inference model, its history in the mode's store (SQLite or Redis). */
export function createRouting(
  config: GantryConfig,
  store: SqliteStore,
  metrics: Metrics,
  log: RoutingLog & { debug(obj: object, msg?: string): void },
): Routing {
  let history: StatusHistory;
  if (config.redisUrl) {
    // Its own patient connection: history writes are rare and never on the request path.
    const redis = new Redis(config.redisUrl, {
      maxRetriesPerRequest: 1,
      commandTimeout: 5_000,
      retryStrategy: reconnectBackoff(1_000),
    });
    redis.on('error', (error: Error) => log.debug({ err: error.message }, 'status history redis error'));
    history = new RedisStatusHistory(redis, config.routing.historyLimit, undefined, true);
  } else {
    history = new SqliteStatusHistory(store.handle, config.routing.historyLimit);
  }
  return new Routing(config.models, {
    metrics,
    history,
    log,
    probes: config.routing.probes,
    probeTargets: probeTargets(config.providers),
  });
}

/** The model list of each openai and anthropic provider: what a probe GETs. */
function probeTargets(providers: readonly ProviderConfig[]): Map<string, ProbeTarget> {
  const targets = new Map<string, ProbeTarget>();
  for (const p of providers) {
    if (p.kind === 'openai' && p.baseUrl) {
      targets.set(p.name, {
        url: `${p.baseUrl.replace(/\/+$/, '')}/models`,
        headers: { ...p.headers, ...(p.apiKey ? { authorization: `Bearer ${p.apiKey}` } : {}) },
      });
    } else if (p.kind === 'anthropic') {
      const base = (p.baseUrl ?? 'https://api.anthropic.com').replace(/\/+$/, '').replace(/\/v1$/, '');
      targets.set(p.name, {
        url: `${base}/v1/models`,
        headers: {
          'anthropic-version': '2023-06-01',
          ...p.headers,
          ...(p.apiKey ? { 'x-api-key': p.apiKey } : {}),
        },
      });
    }
  }
  return targets;
}
