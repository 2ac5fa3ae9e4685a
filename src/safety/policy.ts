/**
 * Safety policies (README, "Safety"): what runs and what it may do, chosen per model, per account and per
 * key. Resolved once per request from maps built at start: the most specific setting wins (key, then
 * account, then model, then `safety.default`).
 */
import type { DetectionCategory, HarmCategory, PiiKind, Severity } from './categories.js';
import { PII_KINDS } from './categories.js';

/** off: nothing runs. annotate: results added, nothing blocked. block: flagged prompts and completions stop. */
export type SafetyMode = 'off' | 'annotate' | 'block';

/** The severity at or above which a harm category is filtered (`off`: never). */
export type Threshold = Exclude<Severity, 'safe'> | 'off';

export interface SafetyPolicy {
  name: string;
  mode: SafetyMode;
  /** The classifier that runs (a name from `safety.classifiers`, or the built-in `offline`). */
  classifier: string;
  /** Personal data masked before the request goes upstream (empty: none). */
  redact: readonly PiiKind[];
  thresholds: Readonly<Record<HarmCategory, Threshold>>;
  /** Detection categories that are filtered when detected. */
  filter: Readonly<Record<DetectionCategory, boolean>>;
}

export const DEFAULT_THRESHOLDS: Readonly<Record<HarmCategory, Threshold>> = {
  hate: 'medium',
  sexual: 'medium',
  violence: 'medium',
  self_harm: 'medium',
};

export const DEFAULT_FILTER: Readonly<Record<DetectionCategory, boolean>> = {
  jailbreak: true,
  indirect_attack: true,
  profanity: false,
  protected_material_text: true,
  protected_material_code: false,
  pii: false,
};

/** The policies every config has; `safety.policies` may add more (not replace these). */
export const PRESET_POLICIES: Readonly<Record<string, SafetyPolicy>> = {
  off: preset('off', 'off', []),
  annotate: preset('annotate', 'annotate', []),
  block: preset('block', 'block', []),
  redact: preset('redact', 'annotate', PII_KINDS),
};

function preset(name: string, mode: SafetyMode, redact: readonly PiiKind[]): SafetyPolicy {
  return {
    name,
    mode,
    classifier: 'offline',
    redact,
    thresholds: DEFAULT_THRESHOLDS,
    filter: DEFAULT_FILTER,
  };
}

/** Where a request's policy comes from: built at start from the config (config/load.ts). */
export interface PolicyTable {
  /** Policy by name: the presets and `safety.policies`. */
  policies: ReadonlyMap<string, SafetyPolicy>;
  /** Policy name for models that name none. */
  defaultPolicy: string;
  /** By model namespace and account name. */
  byModel: ReadonlyMap<string, string>;
  byAccount: ReadonlyMap<string, string>;
  /**
   * By the SHA-256 of a config-declared key (the value of its `key_env`), never by its name: an account
   * owner can give any new key any name, so a name would let them claim a key's (weaker) policy.
   */
  byKeyHash: ReadonlyMap<string, string>;
}

/**
 * A key policy by the id the key has in the store: `byKeyHash` read through `idOf` (the store's live key
 * with that hash) once at start, after the config's keys are stored. A key absent from the store cannot
 * authenticate, so it needs no entry.
 */
export function keyPoliciesById(
  table: PolicyTable,
  idOf: (keyHash: string) => string | undefined,
): ReadonlyMap<string, string> {
  const byId = new Map<string, string>();
  for (const [hash, name] of table.byKeyHash) {
    const id = idOf(hash);
    if (id !== undefined) byId.set(id, name);
  }
  return byId;
}

/**
 * The policy of one request: the key's, else the account's, else the model's, else the default. `keyId`
 * is the store id of the key the request authenticated with (see keyPoliciesById).
 */
export function resolvePolicy(
  table: PolicyTable,
  byKeyId: ReadonlyMap<string, string>,
  model: string,
  account: string,
  keyId: string,
): SafetyPolicy {
  const name =
    byKeyId.get(keyId) ?? table.byAccount.get(account) ?? table.byModel.get(model) ?? table.defaultPolicy;
  // config/load.ts checks every name at start.
  return table.policies.get(name) as SafetyPolicy;
}
