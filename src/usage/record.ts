/**
 * One usage record per inference request (and later per prediction): what billing is computed from.
 * Never carries a key or any other secret: `key_id` is the id of the key record, not the key.
 */

/** `forward`: another OpenAI endpoint (audio, images, moderations) relayed as it is. */
export type UsageApi = 'chat' | 'responses' | 'embeddings' | 'forward' | 'prediction';
export type UsageOutcome = 'ok' | 'error' | 'client_aborted';
/**
 * What the safety layer did to the request (README, "Safety"): `blocked` (a check stopped the prompt or
 * the answer), `redacted` (personal data was masked before it went upstream), `annotated` (checks ran and
 * their results were attached, nothing stopped or masked); null when the policy was off.
 */
export type UsageSafetyAction = 'blocked' | 'redacted' | 'annotated';

export interface MediaUnits {
  /** e.g. 'image', 'second', 'megapixel'. */
  unit: string;
  quantity: number;
}

export interface UsageRecord {
  /** Sortable unique id (UUIDv7, see newUsageId); also the idempotency key of every sink and debit. */
  id: string;
  /** `Date.prototype.toISOString()` form, so that string order is time order in the indexes. */
  time: string;
  account_id: string;
  key_id: string;
  model: string;
  provider: string;
  api: UsageApi;
  outcome: UsageOutcome;
  status: number;
  error_id: string | null;
  input_tokens: number;
  /** A subset of input_tokens, not an addition. */
  cached_input_tokens: number;
  /** Tokens written to the prompt cache: a subset of input_tokens, apart from cached_input_tokens. */
  cache_write_input_tokens: number;
  output_tokens: number;
  media_units: MediaUnits | null;
  /** In the model's price currency. */
  cost: number;
  currency: string;
  credits: number;
  latency_ms: number;
  ttft_ms: number | null;
  stream: boolean;
  /** Safety categories flagged by any check of the request, sorted; [] when none or off. Never any text. */
  safety_flags: string[];
  safety_action: UsageSafetyAction | null;
}

/** A record that no sink can store; sinks check the whole batch before writing any of it. */
export class UsageRecordError extends Error {
  constructor(
    readonly recordId: string | undefined,
    message: string,
  ) {
    super(`usage record ${recordId ?? '(no id)'}: ${message}`);
    this.name = 'UsageRecordError';
  }
}

const APIS: ReadonlySet<string> = new Set<UsageApi>([
  'chat',
  'responses',
  'embeddings',
  'forward',
  'prediction',
]);
const OUTCOMES: ReadonlySet<string> = new Set<UsageOutcome>(['ok', 'error', 'client_aborted']);
const SAFETY_ACTIONS: ReadonlySet<string> = new Set<UsageSafetyAction>(['blocked', 'redacted', 'annotated']);
/** A category name: also safe to join with commas (the ledger and the stream keep the list as one field). */
const FLAG = /^[a-z_]{1,64}$/;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const MAX_ID = 128;

function text(value: unknown, max = 256): boolean {
  return typeof value === 'string' && value.length > 0 && value.length <= max;
}

function count(value: unknown): boolean {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

function amount(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}

/** The reason the record cannot be stored, or undefined when it is fine. Cheap: called in `add()`. */
export function usageRecordProblem(r: UsageRecord): string | undefined {
  if (!text(r.id, MAX_ID)) return 'id must be a non-empty string of at most 128 characters';
  if (typeof r.time !== 'string' || !ISO_TIME.test(r.time))
    return 'time must be an ISO string from toISOString()';
  if (!text(r.account_id)) return 'account_id is required';
  if (!text(r.key_id)) return 'key_id is required';
  if (!text(r.model)) return 'model is required';
  if (!text(r.provider)) return 'provider is required';
  if (!APIS.has(r.api)) return `api must be one of ${[...APIS].join(', ')}`;
  if (!OUTCOMES.has(r.outcome)) return `outcome must be one of ${[...OUTCOMES].join(', ')}`;
  if (!Number.isInteger(r.status) || r.status < 0 || r.status > 999) return 'status must be an HTTP status';
  if (r.error_id !== null && !text(r.error_id)) return 'error_id must be a string or null';
  if (
    !count(r.input_tokens) ||
    !count(r.cached_input_tokens) ||
    !count(r.cache_write_input_tokens) ||
    !count(r.output_tokens)
  ) {
    return 'token counts must be non-negative integers';
  }
  if (r.media_units !== null && (!text(r.media_units?.unit) || !amount(r.media_units?.quantity))) {
    return 'media_units must be null or {unit, quantity >= 0}';
  }
  if (!amount(r.cost) || !amount(r.credits)) return 'cost and credits must be finite and >= 0';
  if (!text(r.currency, 16)) return 'currency is required';
  if (!amount(r.latency_ms) || (r.ttft_ms !== null && !amount(r.ttft_ms))) {
    return 'latency_ms and ttft_ms must be finite and >= 0';
  }
  if (typeof r.stream !== 'boolean') return 'stream must be a boolean';
  if (!Array.isArray(r.safety_flags) || !r.safety_flags.every((f) => typeof f === 'string' && FLAG.test(f))) {
    return 'safety_flags must be a list of category names';
  }
  if (r.safety_action !== null && !SAFETY_ACTIONS.has(r.safety_action)) {
    return `safety_action must be null or one of ${[...SAFETY_ACTIONS].join(', ')}`;
  }
  return undefined;
}

/** Throws on the first bad record, before a sink writes anything: a batch is stored whole or not at all. */
export function assertUsageBatch(records: readonly UsageRecord[]): void {
  for (const r of records) {
    const problem = usageRecordProblem(r);
    if (problem) throw new UsageRecordError(typeof r.id === 'string' ? r.id : undefined, problem);
  }
}
