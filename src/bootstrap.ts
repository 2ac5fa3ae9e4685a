import { generateKey, hashKey, keyPrefix, MIN_KEY_LENGTH } from './auth/keys.js';
import type { GantryConfig } from './config/types.js';
import type { Store } from './store/types.js';

export const DEFAULT_ACCOUNT = 'default';

/** The shortest GANTRY_BOOTSTRAP_KEY accepted (see MIN_KEY_LENGTH). */
export const MIN_BOOTSTRAP_KEY_LENGTH = MIN_KEY_LENGTH;

/** Why GANTRY_BOOTSTRAP_KEY cannot be used, in one line; undefined when it is fine or not set. */
export function bootstrapKeyProblem(env: NodeJS.ProcessEnv): string | undefined {
  const key = env.GANTRY_BOOTSTRAP_KEY;
  if (!key) return undefined;
  if (key.length < MIN_BOOTSTRAP_KEY_LENGTH) {
    return (
      `GANTRY_BOOTSTRAP_KEY is too short (${key.length} characters): it needs at least ` +
      `${MIN_BOOTSTRAP_KEY_LENGTH} random characters, e.g. \`openssl rand -hex 32\``
    );
  }
  if (!/^[\x21-\x7e]+$/.test(key)) {
    return 'GANTRY_BOOTSTRAP_KEY may hold only printable ASCII characters without spaces (it is sent in a header)';
  }
  return undefined;
}

/** Accounts and keys declared in the config are written to the store at every start (keys hashed). */
export function syncAccounts(store: Store, config: GantryConfig): void {
  for (const entry of config.accounts) {
    const account = store.upsertAccount(entry.name, entry.tier, entry.status);
    for (const key of entry.keys) store.addKey(account.id, key.name, hashKey(key.key), keyPrefix(key.key));
  }
}

/**
 * Whether the config declares a key of this name in this account. New keys may not take such a name: a
 * key's policy follows the key itself, but two keys of one name would still read alike in every log,
 * audit entry and listing.
 */
export function isConfigKeyName(config: GantryConfig, account: string, name: string): boolean {
  return config.accounts.some((a) => a.name === account && a.keys.some((k) => k.name === name));
}

/**
 * On first start (no account at all) creates the `default` account with one key and returns that key so
 * it can be printed once. GANTRY_BOOTSTRAP_KEY chooses the key instead, and is (re)registered on every
 * start, so scripts can rely on it (checked by bootstrapKeyProblem first). Returns the key only when Gantry
 * generated it.
 */
export function bootstrapAccount(
  store: Store,
  config: GantryConfig,
  env: NodeJS.ProcessEnv,
): string | undefined {
  const chosen = env.GANTRY_BOOTSTRAP_KEY || undefined;
  const problem = bootstrapKeyProblem(env);
  if (problem) throw new Error(problem);
  const firstStart = store.countAccounts() === 0;
  if (!firstStart && !chosen) return undefined;
  const tier = Object.keys(config.tiers)[0] ?? 'default';
  const account =
    store.getAccountByName(DEFAULT_ACCOUNT) ?? store.upsertAccount(DEFAULT_ACCOUNT, tier, 'active');
  const key = chosen ?? generateKey();
  store.addKey(
    account.id,
    chosen ? 'bootstrap (GANTRY_BOOTSTRAP_KEY)' : 'bootstrap',
    hashKey(key),
    keyPrefix(key),
  );
  return chosen ? undefined : key;
}
