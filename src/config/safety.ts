/**
 * `safety` in the config → the policy table and the remote classifiers (README, "Safety"). Every policy
 * and classifier name a model, account or key gives is checked here, at start.
 */
import { hashKey } from '../auth/keys.js';
import type { HARM_CATEGORIES, PiiKind } from '../safety/categories.js';
import { DEFAULT_CUTOFFS, type SexualCutoffs } from '../safety/image/mapping.js';
import {
  DEFAULT_FILTER,
  DEFAULT_THRESHOLDS,
  PRESET_POLICIES,
  type SafetyMode,
  type SafetyPolicy,
  type Threshold,
} from '../safety/policy.js';
import type { AccountEntry, ClassifierConfig, ModelEntry, SafetySettings } from './types.js';

export interface RawSafety {
  default?: string;
  stream_window_chars?: number;
  image?: {
    explicit_high?: number;
    explicit_medium?: number;
    explicit_low?: number;
    suggestive_low?: number;
  };
  policies?: Record<
    string,
    {
      mode: SafetyMode;
      classifier?: string;
      redact?: PiiKind[];
      thresholds?: Partial<Record<(typeof HARM_CATEGORIES)[number], Threshold>>;
      filter?: Partial<Record<keyof typeof DEFAULT_FILTER, boolean>>;
    }
  >;
  classifiers?: Record<
    string,
    {
      kind: ClassifierConfig['kind'];
      url: string;
      api_key_env?: string;
      model?: string;
      timeout_ms?: number;
      on_failure?: 'open' | 'closed';
    }
  >;
}

export function buildSafety(
  raw: RawSafety,
  models: readonly ModelEntry[],
  accounts: readonly AccountEntry[],
  env: NodeJS.ProcessEnv,
  fail: (where: string, problem: string) => never,
): SafetySettings {
  const classifiers: ClassifierConfig[] = Object.entries(raw.classifiers ?? {}).map(([name, c]) => {
    if (name === 'offline')
      fail(`/safety/classifiers/${name}`, '"offline" is the built-in classifier\'s name');
    const apiKey = c.api_key_env === undefined ? undefined : env[c.api_key_env];
    if (c.api_key_env !== undefined && !apiKey) {
      fail(`/safety/classifiers/${name}/api_key_env`, `environment variable ${c.api_key_env} is not set`);
    }
    return {
      name,
      kind: c.kind,
      url: c.url,
      apiKey,
      model: c.model,
      timeoutMs: c.timeout_ms ?? 2_000,
      onFailure: c.on_failure ?? 'open',
    };
  });
  const classifierNames = new Set(['offline', ...classifiers.map((c) => c.name)]);

  const policies = new Map<string, SafetyPolicy>(Object.entries(PRESET_POLICIES));
  for (const [name, p] of Object.entries(raw.policies ?? {})) {
    if (name in PRESET_POLICIES) fail(`/safety/policies/${name}`, `"${name}" is a preset policy's name`);
    // `off` runs nothing, so these would silently do nothing: most likely the mode is the mistake.
    const inert = (['classifier', 'redact', 'thresholds', 'filter'] as const).find((k) => p[k] !== undefined);
    if (p.mode === 'off' && inert !== undefined) {
      fail(
        `/safety/policies/${name}/${inert}`,
        `a policy with mode "off" runs nothing, so its ${inert} would never apply: remove it or use mode annotate or block`,
      );
    }
    const classifier = p.classifier ?? 'offline';
    if (!classifierNames.has(classifier)) {
      fail(`/safety/policies/${name}/classifier`, `unknown classifier "${classifier}"`);
    }
    policies.set(name, {
      name,
      mode: p.mode,
      classifier,
      redact: [...new Set(p.redact ?? [])],
      thresholds: { ...DEFAULT_THRESHOLDS, ...p.thresholds },
      filter: { ...DEFAULT_FILTER, ...p.filter },
    });
  }

  const known = (where: string, name: string | undefined): string | undefined => {
    if (name !== undefined && !policies.has(name)) fail(where, `unknown safety policy "${name}"`);
    return name;
  };
  const defaultPolicy = known('/safety/default', raw.default) ?? 'off';
  const byModel = new Map<string, string>();
  models.forEach((m, i) => {
    if (known(`/models/${i}/safety`, m.safety) !== undefined) byModel.set(m.namespace, m.safety as string);
  });
  const byAccount = new Map<string, string>();
  const byKeyHash = new Map<string, string>();
  const keyPaths = new Map<string, string>();
  accounts.forEach((a, i) => {
    if (known(`/accounts/${i}/safety`, a.safety) !== undefined) byAccount.set(a.name, a.safety as string);
    a.keys.forEach((k, j) => {
      const where = `/accounts/${i}/keys/${j}`;
      const hash = hashKey(k.key);
      // One key is one stored key (the first declaration wins there): a second one could not apply.
      const first = keyPaths.get(hash);
      if (first !== undefined)
        fail(`${where}/key_env`, `the same key as ${first} (every key must be distinct)`);
      keyPaths.set(hash, where);
      if (known(`${where}/safety`, k.safety) !== undefined) byKeyHash.set(hash, k.safety as string);
    });
  });
  return {
    table: { policies, defaultPolicy, byModel, byAccount, byKeyHash },
    classifiers,
    streamWindowChars: raw.stream_window_chars ?? 400,
    imageCutoffs: imageCutoffs(raw.image, fail),
  };
}

/**
 * `safety.image` → the image classifier's cut-offs, each key over its default. The explicit ones must
 * rise with the severity (low ≤ medium ≤ high), or a severity could never be reached.
 */
function imageCutoffs(
  raw: RawSafety['image'],
  fail: (where: string, problem: string) => never,
): Readonly<SexualCutoffs> {
  if (raw === undefined) return DEFAULT_CUTOFFS;
  const cutoffs: SexualCutoffs = {
    high: raw.explicit_high ?? DEFAULT_CUTOFFS.high,
    medium: raw.explicit_medium ?? DEFAULT_CUTOFFS.medium,
    low: raw.explicit_low ?? DEFAULT_CUTOFFS.low,
    suggestive: raw.suggestive_low ?? DEFAULT_CUTOFFS.suggestive,
  };
  if (cutoffs.low > cutoffs.medium || cutoffs.medium > cutoffs.high) {
    fail(
      '/safety/image',
      `explicit_low (${cutoffs.low}) ≤ explicit_medium (${cutoffs.medium}) ≤ explicit_high (${cutoffs.high}) is required`,
    );
  }
  return cutoffs;
}
