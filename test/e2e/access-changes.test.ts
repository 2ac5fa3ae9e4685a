/**
 * Changes made with the CLI reach running servers within a second: a revoked key is refused, a suspended
 * account is refused, granted credits are usable. Real `gantry serve` processes and real CLI runs
 * (another process writing the same data dir): in embedded mode the server notices through SQLite's
 * data_version; on Redis, two instances with their own data dirs hear it on pub/sub.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { ACCOUNTS_HASH, CHANNEL, REVOKED_SET } from '../../src/auth/changes.js';
import { hashKey } from '../../src/auth/keys.js';
import { accountIdFor, SqliteStore } from '../../src/store/sqlite.js';
import { SqliteCreditStore } from '../../src/usage/credits-sqlite.js';
import { openLedgerFile } from '../../src/usage/ledger-file.js';
import { type GantryProcess, spawnGantry, stopAllGantry } from '../helpers/gantry-process.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { removeTempDirs, tempDir } from '../helpers/temp-dirs.js';
import { until } from '../helpers/wait.js';

const ROOT = new URL('../..', import.meta.url).pathname;
const TSX = pathToFileURL(join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;
const BOOTSTRAP_KEY = 'gty_e2e-access-bootstrap-0123456789abcdefghijklmnop';
const ACME_KEY = 'gty_e2e-access-acme-0123456789abcdefghijklmnopqrstu';
/** What the brief promises: a change is seen within a second. */
const WITHIN_MS = 1_000;

function config(redis?: TestRedis, suspended = false): string {
  const path = join(tempDir('gantry-access-config-'), 'gantry.yaml');
  writeFileSync(
    path,
    `
server:
  log_level: warn
providers:
  local: { kind: local }
tiers:
  default: {}
credits:
  default_balance: 0
${redis ? `redis: { url: "${redis.url}" }` : ''}
accounts:
  - name: acme
    status: ${suspended ? 'suspended' : 'active'}
    keys: [{ name: ci, key_env: ACME_KEY }]
models:
  - namespace: gantry/local-chat
    name: Local chat
    type: text
    vendor: { name: Gantry, slug: gantry }
    apis: [chat]
    routes: [{ provider: local, model: local-chat }]
  - namespace: acme/paid-chat
    name: Paid chat
    type: text
    vendor: { name: Acme, slug: acme }
    billable: true
    pricing: { amount: 1000, currency: USD, unit: million_token }
    apis: [chat]
    routes: [{ provider: local, model: local-chat }]
`,
  );
  return path;
}

/** `gantry ARGS` run to completion against `dataDir`, as an operator would. */
function cli(args: string[], configPath: string, dataDir: string, env: NodeJS.ProcessEnv = {}) {
  const res = spawnSync(
    process.execPath,
    ['--import', TSX, join(ROOT, 'src/main.ts'), ...args, '--config', configPath],
    {
      cwd: dataDir,
      env: { ...process.env, GANTRY_DATA_DIR: dataDir, ACME_KEY, REDIS_URL: '', ...env },
      encoding: 'utf8',
    },
  );
  if (res.status !== 0) throw new Error(`gantry ${args.join(' ')} failed: ${res.stderr}`);
  return res.stdout;
}

async function chat(g: GantryProcess, key: string, model = 'gantry/local-chat'): Promise<number> {
  const res = await fetch(`${g.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
  });
  await res.arrayBuffer();
  return res.status;
}

/** The id of acme's key in `dataDir`'s store (from `gantry keys list`). */
function acmeKeyId(configPath: string, dataDir: string, env: NodeJS.ProcessEnv = {}): string {
  const line = cli(['keys', 'list', '--account', 'acme'], configPath, dataDir, env)
    .split('\n')
    .find((l) => l.includes('\tci\t'));
  return (line ?? '').split('\t')[0] ?? '';
}

/** Waits for every instance to answer `status`; fails if that took longer than WITHIN_MS from `since`. */
async function seenWithin(
  since: number,
  instances: GantryProcess[],
  call: (g: GantryProcess) => Promise<number>,
  status: number,
): Promise<void> {
  for (const g of instances) {
    await until(`${g.name} to answer ${status}`, async () => (await call(g)) === status, 5_000, 50);
  }
  expect(Date.now() - since).toBeLessThanOrEqual(WITHIN_MS);
}

afterEach(async () => {
  await stopAllGantry(3_000);
});

afterAll(() => {
  removeTempDirs();
});

describe('embedded mode: another process writes the server data dir', () => {
  /** A Gantry on its own data dir, serving the bootstrap key and acme's key. */
  async function startEmbedded() {
    const dataDir = tempDir('gantry-access-data-');
    const g = await spawnGantry({
      config: config(),
      dataDir,
      env: { GANTRY_BOOTSTRAP_KEY: BOOTSTRAP_KEY, ACME_KEY },
    });
    return { g, dataDir };
  }

  // The CLI's own code (SqliteStore, the ledger file) run from this test process: it writes the file at a
  // known moment, right after a request put the key or the balance in the server's cache.
  it('a revoked key is refused within a second', async () => {
    const { g, dataDir } = await startEmbedded();
    const store = new SqliteStore(join(dataDir, 'gantry.db'));
    try {
      const id = store.listKeys(store.getAccountByName('acme')?.id)[0]?.id as string;
      expect(await chat(g, ACME_KEY)).toBe(200);
      expect(store.revokeKey(id)).toBe(true);
      await seenWithin(Date.now(), [g], (x) => chat(x, ACME_KEY), 401);
      expect(await chat(g, BOOTSTRAP_KEY)).toBe(200);
    } finally {
      store.close();
    }
  }, 60_000);

  it('a suspended account is refused within a second', async () => {
    const { g, dataDir } = await startEmbedded();
    const store = new SqliteStore(join(dataDir, 'gantry.db'));
    try {
      expect(await chat(g, ACME_KEY)).toBe(200);
      store.upsertAccount('acme', 'default', 'suspended');
      await seenWithin(Date.now(), [g], (x) => chat(x, ACME_KEY), 401);
    } finally {
      store.close();
    }
  }, 60_000);

  it('granted credits can be spent within a second', async () => {
    const { g, dataDir } = await startEmbedded();
    const ledgerDb = openLedgerFile(join(dataDir, 'ledger.db'));
    const credits = new SqliteCreditStore(ledgerDb, { defaultBalance: 0 });
    try {
      expect(await chat(g, ACME_KEY, 'acme/paid-chat')).toBe(402);
      credits.grant(accountIdFor('acme'), 1000, 'test');
      await seenWithin(Date.now(), [g], (x) => chat(x, ACME_KEY, 'acme/paid-chat'), 200);
    } finally {
      credits.close();
      ledgerDb.close();
    }
  }, 60_000);

  it('a key revoked with the gantry command is refused', async () => {
    const dataDir = tempDir('gantry-access-data-');
    const configPath = config();
    const g = await spawnGantry({
      config: configPath,
      dataDir,
      env: { GANTRY_BOOTSTRAP_KEY: BOOTSTRAP_KEY, ACME_KEY },
    });
    expect(await chat(g, ACME_KEY)).toBe(200);
    cli(['keys', 'revoke', acmeKeyId(configPath, dataDir)], configPath, dataDir);
    await seenWithin(Date.now(), [g], (x) => chat(x, ACME_KEY), 401);
  }, 60_000);
});

describeRedis('distributed mode: two instances with their own data dirs', () => {
  let redis: TestRedis;
  afterAll(async () => {
    await redis?.close();
  });

  it('a revocation and a grant made on one instance reach both within a second', async () => {
    redis = await startRedis();
    const configPath = config(redis);
    const dirs = [tempDir('gantry-access-a-'), tempDir('gantry-access-b-')];
    const env = { GANTRY_BOOTSTRAP_KEY: BOOTSTRAP_KEY, ACME_KEY, GANTRY_SECRET_KEY: 'b'.repeat(64) };
    const [a, b] = (await Promise.all(
      dirs.map((dataDir, i) => spawnGantry({ name: i === 0 ? 'A' : 'B', config: configPath, dataDir, env })),
    )) as [GantryProcess, GantryProcess];

    for (const g of [a, b]) expect(await chat(g, ACME_KEY, 'acme/paid-chat')).toBe(402);
    cli(['credits', 'grant', '--account', 'acme', '--amount', '1000'], configPath, dirs[0] as string, {
      REDIS_URL: redis.url,
    });
    await seenWithin(Date.now(), [a, b], (x) => chat(x, ACME_KEY, 'acme/paid-chat'), 200);

    cli(['keys', 'revoke', acmeKeyId(configPath, dirs[0] as string)], configPath, dirs[0] as string);
    await seenWithin(Date.now(), [a, b], (x) => chat(x, ACME_KEY), 401);

    // An instance started later learns the revocation at start.
    const c = await spawnGantry({ name: 'C', config: configPath, dataDir: tempDir('gantry-access-c-'), env });
    expect(await chat(c, ACME_KEY)).toBe(401);
    expect(await chat(c, BOOTSTRAP_KEY)).toBe(200);
  }, 90_000);

  it('a revocation or suspension made while Redis was down reaches the other instance within a second of its return', async () => {
    const down = await startRedis({ aof: true });
    try {
      const configPath = config(down);
      const dirs = [tempDir('gantry-access-a-'), tempDir('gantry-access-b-')];
      const env = { GANTRY_BOOTSTRAP_KEY: BOOTSTRAP_KEY, ACME_KEY, GANTRY_SECRET_KEY: 'b'.repeat(64) };
      const [a, b] = (await Promise.all(
        dirs.map((dataDir, i) =>
          spawnGantry({ name: i === 0 ? 'A' : 'B', config: configPath, dataDir, env }),
        ),
      )) as [GantryProcess, GantryProcess];
      for (const g of [a, b]) expect(await chat(g, ACME_KEY)).toBe(200);

      /** `change` made on A's data dir while Redis is down: B refuses `key` within a second of its return. */
      const duringOutage = async (change: () => void, key: string) => {
        await down.stop();
        change();
        // A applied it to its own store; its relay failed.
        await until('A to refuse the key', async () => (await chat(a, key)) === 401, 5_000, 50);
        expect(await chat(b, key)).toBe(200);
        await down.start();
        const probe = new Redis(down.url, { maxRetriesPerRequest: 1 });
        try {
          // Both subscribers are back.
          await until(
            'both instances to subscribe again',
            async () => ((await probe.pubsub('NUMSUB', CHANNEL)) as [string, number])[1] === 2,
            10_000,
            20,
          );
          await seenWithin(Date.now(), [b], (x) => chat(x, key), 401);
        } finally {
          probe.disconnect();
        }
      };

      // Both made by the command on A's data dir, which takes long enough for A's relay to fail.
      // acme suspended in the config, applied by the next command.
      const suspendedConfig = config(down, true);
      await duringOutage(() => cli(['keys', 'list'], suspendedConfig, dirs[0] as string), ACME_KEY);
      expect(await chat(b, BOOTSTRAP_KEY)).toBe(200);
      const bootstrapId = (
        cli(['keys', 'list', '--account', 'default'], suspendedConfig, dirs[0] as string)
          .split('\n')
          .find((l) => l.includes('bootstrap')) ?? ''
      ).split('\t')[0] as string;
      await duringOutage(
        () => cli(['keys', 'revoke', bootstrapId], suspendedConfig, dirs[0] as string),
        BOOTSTRAP_KEY,
      );
    } finally {
      await down.close();
    }
  }, 90_000);

  it('a suspension and a revocation published while the subscriber was cut off are applied on its return', async () => {
    // Its own server: the first test's revocation is in the shared one's set.
    const server = await startRedis();
    const g = await spawnGantry({
      config: config(server),
      dataDir: tempDir('gantry-access-d-'),
      env: { GANTRY_BOOTSTRAP_KEY: BOOTSTRAP_KEY, ACME_KEY, GANTRY_SECRET_KEY: 'b'.repeat(64) },
    });
    const other = new Redis(server.url, { maxRetriesPerRequest: 1 });
    // Another instance's relay, in one transaction with the disconnection of every subscriber: the
    // message is published while this instance's subscriber is gone.
    const relayWhileCutOff = async (write: (m: ReturnType<Redis['multi']>) => void, change: object) => {
      const multi = other.multi().call('CLIENT', 'KILL', 'TYPE', 'pubsub');
      write(multi);
      const results = await multi.publish(CHANNEL, JSON.stringify(change)).exec();
      expect(results?.at(-1)?.[1]).toBe(0);
    };
    try {
      expect(await chat(g, ACME_KEY)).toBe(200);
      const acme = { id: accountIdFor('acme'), status: 'suspended' };
      await relayWhileCutOff(
        (m) => m.hset(ACCOUNTS_HASH, acme.id, JSON.stringify({ status: 'suspended', at: Date.now() })),
        { accounts: [acme] },
      );
      await seenWithin(Date.now(), [g], (x) => chat(x, ACME_KEY), 401);

      expect(await chat(g, BOOTSTRAP_KEY)).toBe(200);
      const revoked = hashKey(BOOTSTRAP_KEY);
      await relayWhileCutOff((m) => m.sadd(REVOKED_SET, revoked), { revoked: [revoked] });
      await seenWithin(Date.now(), [g], (x) => chat(x, BOOTSTRAP_KEY), 401);
    } finally {
      other.disconnect();
      await stopAllGantry(3_000);
      await server.close();
    }
  }, 90_000);
});
