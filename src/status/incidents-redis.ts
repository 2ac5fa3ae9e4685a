import type { Redis } from 'ioredis';
import { DEFAULT_INCIDENT_LIMIT, type IncidentStore, MAX_INCIDENT_LIMIT } from './incident-store.js';
import type { Incident, IncidentImpact, IncidentUpdate } from './incidents.js';

/** One hash tag: every key of the incidents sits in one slot, so each script may touch them all. */
export const INCIDENT_PREFIX = 'gantry:{incidents}:';

const incidentKey = (id: string) => `${INCIDENT_PREFIX}i:${id}`;
const BY_OPENED = `${INCIDENT_PREFIX}by-opened`;
const OPEN = `${INCIDENT_PREFIX}open`;
const RESOLVED = `${INCIDENT_PREFIX}resolved`;
/** The id of a component's open automatic incident: SET NX makes it one for every instance. */
export const autoKey = (component: string) => `${INCIDENT_PREFIX}open:${component}`;

// KEYS: incident, by-opened, open, auto key (or a dummy). ARGV: json, id, opened_at, '1' when automatic.
// A stale auto key (its incident resolved or gone) is taken over.
const CREATE = `
if ARGV[4] == '1' then
  local cur = redis.call('GET', KEYS[4])
  if cur then
    local data = redis.call('GET', '${INCIDENT_PREFIX}i:' .. cur)
    if data and cjson.decode(data).resolvedAt == cjson.null then return cur end
  end
  redis.call('SET', KEYS[4], ARGV[2])
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
return false
`;

// KEYS: incident, open, resolved, then each component's auto key. ARGV: update json, impact or '',
// '1' to resolve, id, '1' to skip an update that would not change the impact. Answers the incident's
// new JSON, or 'missing' / 'resolved' / 'unchanged'.
const APPEND = `
local data = redis.call('GET', KEYS[1])
if not data then return 'missing' end
local inc = cjson.decode(data)
if inc.resolvedAt ~= cjson.null then return 'resolved' end
if ARGV[5] == '1' and ARGV[2] ~= '' and inc.impact == ARGV[2] then return 'unchanged' end
local u = cjson.decode(ARGV[1])
table.insert(inc.updates, u)
inc.status = u.status
if ARGV[2] ~= '' then inc.impact = ARGV[2] end
if ARGV[3] == '1' then
  inc.resolvedAt = u.at
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('ZADD', KEYS[3], u.at, ARGV[4])
  for i = 4, #KEYS do
    if redis.call('GET', KEYS[i]) == ARGV[4] then redis.call('DEL', KEYS[i]) end
  end
end
local out = cjson.encode(inc)
redis.call('SET', KEYS[1], out)
return out
`;

/**
 * The distributed mode's incidents, shared by every instance: each incident one JSON value, sorted sets
 * by opening and resolution time, and per component the id of its open automatic incident. Every change
 * is one Lua script, so it is atomic across instances.
 */
export class RedisIncidentStore implements IncidentStore {
  readonly shared = true;

  constructor(private readonly redis: Redis) {}

  async create(incident: Incident, autoComponent: string | undefined): Promise<Incident | undefined> {
    const keys = [incidentKey(incident.id), BY_OPENED, OPEN, autoKey(autoComponent ?? '')];
    const args = [
      JSON.stringify(incident),
      incident.id,
      String(incident.openedAt),
      autoComponent ? '1' : '0',
    ];
    const existing = (await this.redis.eval(CREATE, keys.length, ...keys, ...args)) as string | null;
    if (existing === null) return undefined;
    return this.get(existing);
  }

  async openAutoOf(component: string): Promise<Incident | undefined> {
    const id = await this.redis.get(autoKey(component));
    if (id === null) return undefined;
    const incident = await this.get(id);
    return incident?.resolvedAt === null ? incident : undefined;
  }

  async get(id: string): Promise<Incident | undefined> {
    const data = await this.redis.get(incidentKey(id));
    return data === null ? undefined : parse(data);
  }

  async list(query: { since?: number; limit?: number; open?: boolean }): Promise<Incident[]> {
    const limit = Math.min(query.limit ?? DEFAULT_INCIDENT_LIMIT, MAX_INCIDENT_LIMIT);
    let ids: string[];
    if (query.open) ids = await this.redis.zrevrange(OPEN, 0, limit - 1);
    else if (query.since !== undefined) {
      const [open, resolved] = await Promise.all([
        this.redis.zrevrange(OPEN, 0, limit - 1),
        this.redis.zrevrangebyscore(RESOLVED, '+inf', query.since, 'LIMIT', 0, limit),
      ]);
      ids = [...open, ...resolved];
    } else ids = await this.redis.zrevrange(BY_OPENED, 0, limit - 1);
    if (ids.length === 0) return [];
    const values = await this.redis.mget(ids.map(incidentKey));
    const found = values.filter((v): v is string => v !== null).map(parse);
    found.sort((a, b) => b.openedAt - a.openedAt || a.id.localeCompare(b.id));
    return found.slice(0, limit);
  }

  append(
    id: string,
    update: IncidentUpdate,
    impact?: IncidentImpact,
    impactChangeOnly = false,
  ): Promise<Incident | 'missing' | 'resolved' | 'unchanged'> {
    return this.change(id, update, impact, false, impactChangeOnly);
  }

  resolve(id: string, update: IncidentUpdate): Promise<Incident | 'missing' | 'resolved'> {
    return this.change(id, update, undefined, true, false) as Promise<Incident | 'missing' | 'resolved'>;
  }

  async close(): Promise<void> {}

  private async change(
    id: string,
    update: IncidentUpdate,
    impact: IncidentImpact | undefined,
    resolve: boolean,
    impactChangeOnly: boolean,
  ): Promise<Incident | 'missing' | 'resolved' | 'unchanged'> {
    const current = await this.get(id);
    if (current === undefined) return 'missing';
    const keys = [incidentKey(id), OPEN, RESOLVED, ...current.components.map(autoKey)];
    const args = [
      JSON.stringify(update),
      impact ?? '',
      resolve ? '1' : '0',
      id,
      impactChangeOnly ? '1' : '0',
    ];
    const out = (await this.redis.eval(APPEND, keys.length, ...keys, ...args)) as string;
    if (out === 'missing' || out === 'resolved' || out === 'unchanged') return out;
    return parse(out);
  }
}

/** Lua's cjson writes an empty table as `{}` and escapes `/`: read back into the incident's shape. */
function parse(data: string): Incident {
  const raw = JSON.parse(data) as Incident;
  return {
    id: raw.id,
    title: raw.title,
    components: Array.isArray(raw.components) ? raw.components : [],
    impact: raw.impact,
    status: raw.status,
    source: raw.source,
    openedAt: raw.openedAt,
    resolvedAt: raw.resolvedAt ?? null,
    updates: Array.isArray(raw.updates) ? raw.updates : [],
  };
}
