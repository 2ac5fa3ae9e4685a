import type { UsageApi, UsageOutcome, UsageRecord, UsageSafetyAction } from './record.js';

/**
 * A record as flat stream fields, so billing can read an entry without JSON. Null values are left out
 * (an empty string would be ambiguous), booleans are '1' / '0', media_units is split in two fields,
 * safety_flags is one comma-separated field (left out when empty).
 */
export function toStreamFields(r: UsageRecord): string[] {
  const fields = [
    'id',
    r.id,
    'time',
    r.time,
    'account_id',
    r.account_id,
    'key_id',
    r.key_id,
    'model',
    r.model,
    'provider',
    r.provider,
    'api',
    r.api,
    'outcome',
    r.outcome,
    'status',
    String(r.status),
    'input_tokens',
    String(r.input_tokens),
    'cached_input_tokens',
    String(r.cached_input_tokens),
    'cache_write_input_tokens',
    String(r.cache_write_input_tokens),
    'output_tokens',
    String(r.output_tokens),
    'cost',
    String(r.cost),
    'currency',
    r.currency,
    'credits',
    String(r.credits),
    'latency_ms',
    String(r.latency_ms),
    'stream',
    r.stream ? '1' : '0',
  ];
  if (r.error_id !== null) fields.push('error_id', r.error_id);
  if (r.ttft_ms !== null) fields.push('ttft_ms', String(r.ttft_ms));
  if (r.media_units !== null) {
    fields.push('media_unit', r.media_units.unit, 'media_quantity', String(r.media_units.quantity));
  }
  if (r.safety_flags.length > 0) fields.push('safety_flags', r.safety_flags.join(','));
  if (r.safety_action !== null) fields.push('safety_action', r.safety_action);
  return fields;
}

/** The inverse of toStreamFields; throws on an entry that is not a usage record. */
export function fromStreamFields(fields: readonly string[]): UsageRecord {
  const map = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) map.set(fields[i] as string, fields[i + 1] as string);
  const str = (name: string): string => {
    const value = map.get(name);
    if (value === undefined) throw new Error(`usage stream entry without ${name}`);
    return value;
  };
  const num = (name: string): number => Number(str(name));
  const optional = (name: string): number | null => (map.has(name) ? num(name) : null);
  const mediaUnit = map.get('media_unit');
  const flags = map.get('safety_flags');
  return {
    id: str('id'),
    time: str('time'),
    account_id: str('account_id'),
    key_id: str('key_id'),
    model: str('model'),
    provider: str('provider'),
    api: str('api') as UsageApi,
    outcome: str('outcome') as UsageOutcome,
    status: num('status'),
    error_id: map.get('error_id') ?? null,
    input_tokens: num('input_tokens'),
    cached_input_tokens: num('cached_input_tokens'),
    // Entries an older Gantry wrote have no cache writes.
    cache_write_input_tokens: optional('cache_write_input_tokens') ?? 0,
    output_tokens: num('output_tokens'),
    media_units: mediaUnit === undefined ? null : { unit: mediaUnit, quantity: num('media_quantity') },
    cost: num('cost'),
    currency: str('currency'),
    credits: num('credits'),
    latency_ms: num('latency_ms'),
    ttft_ms: optional('ttft_ms'),
    stream: str('stream') === '1',
    // Entries an older Gantry wrote have no safety fields: nothing was checked.
    safety_flags: flags === undefined || flags === '' ? [] : flags.split(','),
    safety_action: (map.get('safety_action') as UsageSafetyAction | undefined) ?? null,
  };
}
