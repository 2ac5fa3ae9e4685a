/** Persistent state of the inference core: accounts, API keys (hashed), and Responses history. */

export interface Account {
  id: string;
  name: string;
  tier: string;
  status: 'active' | 'suspended';
  createdAt: string;
}

export interface ApiKeyRecord {
  id: string;
  accountId: string;
  name: string;
  /** The first characters of the key, for people to tell keys apart; never enough to use it. */
  prefix: string;
  createdAt: string;
  revokedAt: string | null;
  lastUsedAt: string | null;
}

export interface StoredResponse {
  id: string;
  accountId: string;
  model: string;
  createdAt: number;
  /**
   * The whole conversation up to and including this response's output, as chat messages (text, image
   * parts, tool calls, tool results). Empty for a passed-through response, which its upstream keeps.
   */
  conversation: Array<{ role: string; [field: string]: unknown }>;
  /** The Response object as it was returned. */
  response: Record<string, unknown>;
}

export interface Store {
  /** Grows whenever a key is revoked or an account changes, so caches of keys know to forget. */
  readonly revision: number;

  upsertAccount(name: string, tier: string, status: Account['status']): Account;
  getAccount(id: string): Account | undefined;
  getAccountByName(name: string): Account | undefined;
  countAccounts(): number;
  listAccounts(): Account[];
  setAccountTier(id: string, tier: string): boolean;
  setAccountStatus(id: string, status: Account['status']): boolean;

  /** Stores the key's hash; the key itself is never stored. Returns the record. */
  addKey(accountId: string, name: string, keyHash: string, prefix: string): ApiKeyRecord;
  /** The live key with this hash and its account, or undefined (unknown or revoked). */
  findKeyByHash(keyHash: string): { key: ApiKeyRecord; account: Account } | undefined;
  getKey(id: string): ApiKeyRecord | undefined;
  /** The stored hash of a key, or undefined. */
  keyHash(id: string): string | undefined;
  listKeys(accountId?: string): ApiKeyRecord[];
  /** true when a live key was revoked. */
  revokeKey(id: string): boolean;
  /** Records last use for many keys at once (batched off the request path). */
  touchKeys(lastUsed: Map<string, string>): void;

  putResponse(response: StoredResponse): void;
  /** Only the owning account's responses are visible. */
  getResponse(id: string, accountId: string): StoredResponse | undefined;
  /** true when the account's response was there and is now gone. */
  deleteResponse(id: string, accountId: string): boolean;

  close(): void;
}
