import { generateKey, hashKey, keyPrefix } from './auth/keys.js';
import type { GantryConfig } from './config/types.js';
import type { Store } from './store/types.js';

export const DEFAULT_ACCOUNT = 'default';

/** Accounts and keys declared in the config are written to the store at every start (keys hashed). */
export function syncAccounts(store: Store, config: GantryConfig): void {
  for (const entry of config.accounts) {
    const account = store.upsertAccount(entry.name, entry.tier, entry.status);
    for (const key of entry.keys) store.addKey(account.id, key.name, hashKey(key.key), keyPrefix(key.key));
  }
}

/**
 * On first start (no account at all) creates the `default` account with one key and returns that key so
 * it can be printed once. GANTRY_BOOTSTRAP_KEY chooses the key instead, and is (re)registered on every
 * start, so scripts can rely on it. Returns the key only when Gantry generated it.
 */
export function bootstrapAccount(
  store: Store,
  config: GantryConfig,
  env: NodeJS.ProcessEnv,
): string | undefined {
  const chosen = env.GANTRY_BOOTSTRAP_KEY;
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
