import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { buildApp } from './app.js';
import { generateKey, hashKey, keyPrefix } from './auth/keys.js';
import {
  bootstrapAccount,
  bootstrapKeyProblem,
  DEFAULT_ACCOUNT,
  isConfigKeyName,
  syncAccounts,
} from './bootstrap.js';
import { ConfigError, loadConfig, resolveConfigPath } from './config/load.js';
import type { GantryConfig } from './config/types.js';
import { GantryError } from './errors.js';
import { endStreams } from './inference/stream-reply.js';
import { loadSecretKey } from './predictions/secrets.js';
import type { Role } from './predictions/setup.js';
import { checkSharedState } from './predictions/shared-state.js';
import { SqliteStore } from './store/sqlite.js';
import { type CreditStore, RedisCreditStore, SqliteCreditStore } from './usage/index.js';
import { hasOldLedgerTables, openLedgerFile } from './usage/ledger-file.js';

const USAGE = `gantry: OpenAI-compatible inference gateway

usage:
  gantry serve [--config FILE] [--host HOST] [--port PORT] [--role api|worker|all]
  gantry keys create [--account NAME] [--name KEYNAME] [--config FILE]
  gantry keys list [--account NAME] [--config FILE]
  gantry keys revoke KEY_ID [--config FILE]
  gantry credits grant --account NAME --amount CREDITS [--note TEXT] [--config FILE]
  gantry credits balance --account NAME [--config FILE]
  gantry config check [--config FILE]
  gantry admin-key create [--name NAME]

--role (default all): api serves the HTTP API, worker runs predictions and webhook deliveries; apart,
they need REDIS_URL (the queue and store they share).
The configuration is --config, else $GANTRY_CONFIG, else ./config/gantry.yaml, else the embedded default.
`;

/** After the deadline has ended the streams: how long answers still being written get to finish. */
const LAST_WRITES_MS = 1_000;

/** An error the command reports in one line, `gantry: <message>`, exiting with `exitCode`. */
export class CliError extends Error {
  override name = 'CliError';
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

const OPTIONS = {
  config: { type: 'string' },
  host: { type: 'string' },
  port: { type: 'string' },
  role: { type: 'string' },
  account: { type: 'string' },
  name: { type: 'string' },
  amount: { type: 'string' },
  note: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/**
 * parseArgs, with its errors as one line. A negative number after an option is its value (`--amount -100`
 * takes credits back), where parseArgs alone would refuse it as ambiguous.
 */
function parseCommandLine(argv: string[]) {
  try {
    return parseArgs({ args: joinNegativeValues(argv), allowPositionals: true, options: OPTIONS });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const message = err instanceof Error ? err.message : String(err);
    const option = /'(?:-\w, )?(-[^' ]+)/.exec(message)?.[1] ?? '';
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
      throw new CliError(`unknown option ${option} (gantry --help lists the options)`, 2);
    }
    if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
      const problem = /does not take an argument/.test(message) ? 'takes no value' : 'needs a value';
      throw new CliError(`${option} ${problem}`, 2);
    }
    throw new CliError(message.split('\n')[0] ?? message, 2);
  }
}

/** `--opt -5` → `--opt=-5` for string options, so a negative number is read as the option's value. */
function joinNegativeValues(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i] as string;
    const next = argv[i + 1];
    const name = word.startsWith('--') ? word.slice(2) : '';
    const isString = name in OPTIONS && OPTIONS[name as keyof typeof OPTIONS].type === 'string';
    if (isString && next !== undefined && /^-\.?\d/.test(next)) {
      out.push(`${word}=${next}`);
      i++;
    } else out.push(word);
  }
  return out;
}

/** One line for any error that ends a command: what went wrong, without a stack. */
export function describeError(err: unknown): string {
  if (err instanceof CliError) return err.message;
  if (err instanceof ConfigError) return `configuration error: ${err.message}`;
  const errno = err as NodeJS.ErrnoException & { address?: string; port?: number };
  if (errno?.syscall === 'listen') return listenProblem(errno);
  if (err instanceof AggregateError && !err.message && err.errors[0] !== undefined) {
    return describeError(err.errors[0]);
  }
  const message = err instanceof Error ? err.message : String(err);
  const code = typeof errno?.code === 'string' && !message.includes(errno.code) ? ` (${errno.code})` : '';
  return `${message.replace(/\s*\n\s*/g, ' ')}${code}`;
}

/** Why a server could not listen (the API's port or the metrics port). */
function listenProblem(err: NodeJS.ErrnoException & { address?: string; port?: number }): string {
  const where = `${err.address ?? ''}:${err.port ?? ''}`;
  switch (err.code) {
    case 'EADDRINUSE':
      return `cannot listen on ${where}: the port is in use (another Gantry?); choose another with --port or PORT`;
    case 'EACCES':
      return `cannot listen on ${where}: permission denied (ports below 1024 need privileges); choose another with --port or PORT`;
    case 'EADDRNOTAVAIL':
      return `cannot listen on ${where}: no such address on this machine; choose another with --host or HOST`;
    default:
      return `cannot listen on ${where}: ${err.message}`;
  }
}

/**
 * The `gantry` command as bin/gantry.js runs it: every error ends it with one line naming the problem
 * (LOG_LEVEL=debug adds the stack of an unexpected one) and a non-zero exit code.
 */
export async function runCli(argv: string[]): Promise<number> {
  try {
    return await main(argv);
  } catch (err) {
    process.stderr.write(`gantry: ${describeError(err)}\n`);
    const debug = process.env.LOG_LEVEL === 'debug' || process.env.LOG_LEVEL === 'trace';
    if (debug && !(err instanceof CliError) && err instanceof Error) process.stderr.write(`${err.stack}\n`);
    return err instanceof CliError ? err.exitCode : 1;
  }
}

export async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommandLine(argv);
  const [command, sub, arg] = positionals;
  if (values.help || command === undefined || command === 'help') {
    process.stdout.write(USAGE);
    return command === undefined && !values.help ? 2 : 0;
  }
  // Needs no configuration: it prints what to add to one.
  if (command === 'admin-key') return adminKey(sub, values.name);
  const env = { ...process.env };
  if (values.host) env.HOST = values.host;
  if (values.port) env.PORT = values.port;

  const config = loadConfig(resolveConfigPath(values.config, env), env);

  if (command === 'config' && sub === 'check') {
    const keyProblem = bootstrapKeyProblem(env);
    if (keyProblem) throw new CliError(keyProblem);
    process.stdout.write(
      `${config.source}: ok (${config.providers.length} providers, ${config.models.length} models, ` +
        `${config.accounts.length} accounts)\n`,
    );
    return 0;
  }
  if (command === 'serve') {
    const role = values.role ?? env.GANTRY_ROLE ?? 'all';
    if (role !== 'api' && role !== 'worker' && role !== 'all') {
      process.stderr.write(`gantry: --role must be api, worker or all, not "${role}"\n`);
      return 2;
    }
    if (role !== 'all' && !config.redisUrl) {
      process.stderr.write(
        `gantry: --role ${role} needs REDIS_URL: without Redis, the queue lives in one process (role all)\n`,
      );
      return 2;
    }
    if (role === 'worker' && !config.server.publicUrl) {
      process.stderr.write(
        'gantry: --role worker needs server.public_url (or GANTRY_PUBLIC_URL): the links it puts in webhooks ' +
          'and streams must reach the API instances, not the worker\n',
      );
      return 2;
    }
    const keyProblem = bootstrapKeyProblem(env);
    if (keyProblem) throw new CliError(keyProblem, 2);
    return serve(config, env, role);
  }
  if (command === 'keys') return keys(config, sub, arg, values.account, values.name);
  if (command === 'credits') return credits(config, sub, values.account, values.amount, values.note);
  throw new CliError(`unknown command "${positionals.join(' ')}" (gantry --help lists the commands)`, 2);
}

/** app.listen; when it fails (a port in use, the metrics port too), the app is closed and the reason is one line. */
async function listen(app: FastifyInstance, host: string, port: number): Promise<string> {
  try {
    return await app.listen({ host, port });
  } catch (err) {
    await app.close().catch(() => undefined);
    throw new CliError(describeError(err));
  }
}

function openStore(config: GantryConfig): SqliteStore {
  return new SqliteStore(join(config.server.dataDir, 'gantry.db'));
}

/**
 * On Redis, with prediction models: one line naming what this instance does not share with the others
 * (the secret, the file store), or undefined. A Redis that does not answer skips the check (the instance starts, as it would
 * without Redis), with a warning.
 */
async function sharedStateProblem(config: GantryConfig, env: NodeJS.ProcessEnv): Promise<string | undefined> {
  // Without prediction models the secret and the file store are not used.
  if (!config.redisUrl || !config.models.some((m) => m.serves.includes('predictions'))) return undefined;
  const secret = loadSecretKey(env.GANTRY_SECRET_KEY, config.server.dataDir);
  const local = config.predictions.storage.kind === 'local';
  const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, commandTimeout: 5_000 });
  redis.on('error', () => undefined);
  try {
    return await checkSharedState(redis, {
      secret,
      filesDir: local ? config.predictions.filesDir : undefined,
    });
  } catch (err) {
    process.stderr.write(
      `gantry: warning: could not check on Redis that this instance shares GANTRY_SECRET_KEY and the file store: ${(err as Error).message}\n`,
    );
    return undefined;
  } finally {
    redis.disconnect();
  }
}

async function serve(config: GantryConfig, env: NodeJS.ProcessEnv, role: Role): Promise<number> {
  const problem = await sharedStateProblem(config, env);
  if (problem) {
    process.stderr.write(`gantry: ${problem}\n`);
    return 1;
  }
  const store = openStore(config);
  syncAccounts(store, config);
  // A worker serves no API: the first key is made by the API instances (README, "The `gantry` command").
  const generated = role === 'worker' ? undefined : bootstrapAccount(store, config, env);
  const { app } = await buildApp(config, store, { role });
  const address = await listen(app, config.server.host, config.server.port);
  if (generated) {
    process.stdout.write(
      `\nCreated account "${DEFAULT_ACCOUNT}" with this API key (shown once, store it now):\n\n  ${generated}\n\n`,
    );
  }
  process.stdout.write(`Gantry listening on ${address}/v1 (role: ${role}, config: ${config.source})\n`);

  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    app.log.info({ signal }, 'shutting down');
    // Connections kept alive by clients would hold the shutdown open: close each as soon as it is idle.
    const sweep = setInterval(() => app.server.closeIdleConnections(), 100);
    // At the deadline, streams still running end (inference streams as an upstream failure would: error
    // event, clean end), their upstream calls are aborted and their tickets record their usage; then
    // whatever is still open is cut. Running predictions get the same deadline (the app's preClose).
    // Usage is flushed after (the app's onClose), so every record is written before a supervisor's SIGKILL.
    let cut: NodeJS.Timeout | undefined;
    const deadline = setTimeout(() => {
      const ended = endStreams(
        new GantryError('SERVICE_UNAVAILABLE', {
          message: 'Gantry is shutting down: the stream was ended early; retry the request',
        }),
      );
      app.log.warn({ streams: ended }, 'shutdown deadline: ended the streams still running');
      cut = setTimeout(() => app.server.closeAllConnections(), LAST_WRITES_MS);
    }, config.server.shutdownTimeoutMs);
    await app.close();
    clearInterval(sweep);
    clearTimeout(deadline);
    clearTimeout(cut);
    store.close();
    process.exit(0);
  };
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  return new Promise<number>(() => undefined);
}

/** Admin key names as the config takes them, and safe to paste unquoted into YAML. */
const ADMIN_KEY_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/**
 * `gantry admin-key create`: a new admin key, printed once, and the config line that accepts it (only its
 * SHA-256 goes into the config; README, "Admin API").
 */
function adminKey(sub: string | undefined, name = 'admin'): number {
  if (sub !== 'create') throw new CliError('admin-key needs create (gantry --help shows how)', 2);
  if (!ADMIN_KEY_NAME.test(name)) {
    throw new CliError(
      '--name must be 1 to 64 letters, digits, dots, dashes or underscores, starting with a letter or digit',
      2,
    );
  }
  // As long and as random as an API key; its prefix tells the two apart.
  const key = `gta_${randomBytes(32).toString('base64url')}`;
  process.stdout.write(`${key}\n- { name: ${name}, sha256: ${hashKey(key)} }\n`);
  process.stderr.write(
    `admin key "${name}" (shown once, store it now): add the line after it under admin.keys in the config\n`,
  );
  return 0;
}

/** A balance as the CLI prints it: the number of credits, or `unlimited`. */
function formatCredits(credits: number): string {
  return credits === Number.POSITIVE_INFINITY ? 'unlimited' : String(credits);
}

async function credits(
  config: GantryConfig,
  sub: string | undefined,
  accountName: string | undefined,
  amount: string | undefined,
  note: string | undefined,
): Promise<number> {
  if (sub !== 'grant' && sub !== 'balance') {
    throw new CliError('credits needs grant or balance (gantry --help shows how)', 2);
  }
  if (!accountName) throw new CliError(`credits ${sub} needs --account NAME`, 2);
  const store = openStore(config);
  if (!config.redisUrl && hasOldLedgerTables(store.handle)) {
    // Moving them here would pull them from under an older server still running on this data dir.
    store.close();
    throw new CliError(
      'credits are still in gantry.db (Gantry before 0.2): stop any older server on this data dir, run ' +
        '`gantry serve` once to move them to ledger.db, then run this again',
    );
  }
  const redis = config.redisUrl ? new Redis(config.redisUrl, { maxRetriesPerRequest: 1 }) : undefined;
  const ledgerDb = redis ? undefined : openLedgerFile(join(config.server.dataDir, 'ledger.db'));
  const ledger: CreditStore = ledgerDb
    ? new SqliteCreditStore(ledgerDb, { defaultBalance: config.credits.defaultBalance })
    : new RedisCreditStore(redis as Redis, { defaultBalance: config.credits.defaultBalance });
  try {
    syncAccounts(store, config);
    const account = store.getAccountByName(accountName);
    if (!account) {
      process.stderr.write(`gantry: no account "${accountName}"\n`);
      return 1;
    }
    if (sub === 'balance') {
      process.stdout.write(`${formatCredits(await ledger.balance(account.id))}\n`);
      return 0;
    }
    const credits = Number(amount);
    if (!Number.isFinite(credits) || amount === undefined || amount === '') {
      process.stderr.write('gantry: credits grant needs --amount, a number of credits\n');
      return 2;
    }
    const balance = await ledger.grant(account.id, credits, note ?? 'granted with the CLI');
    process.stdout.write(`${formatCredits(balance)}\n`);
    return 0;
  } finally {
    await ledger.close();
    ledgerDb?.close();
    redis?.disconnect();
    store.close();
  }
}

function keys(
  config: GantryConfig,
  sub: string | undefined,
  arg: string | undefined,
  accountName: string | undefined,
  keyName: string | undefined,
): number {
  const store = openStore(config);
  try {
    syncAccounts(store, config);
    switch (sub) {
      case 'create': {
        const name = accountName ?? DEFAULT_ACCOUNT;
        const newName = keyName ?? 'cli';
        if (isConfigKeyName(config, name, newName)) {
          process.stderr.write(
            `gantry: the config declares a key named "${newName}" in account "${name}": choose another --name\n`,
          );
          return 1;
        }
        const tier = Object.keys(config.tiers)[0] ?? 'default';
        const account = store.getAccountByName(name) ?? store.upsertAccount(name, tier, 'active');
        const key = generateKey();
        const record = store.addKey(account.id, newName, hashKey(key), keyPrefix(key));
        process.stdout.write(`${key}\n`);
        process.stderr.write(`key ${record.id} "${record.name}" for account "${name}" (shown once)\n`);
        return 0;
      }
      case 'list': {
        const account = accountName ? store.getAccountByName(accountName) : undefined;
        if (accountName && !account) {
          process.stderr.write(`gantry: no account "${accountName}"\n`);
          return 1;
        }
        for (const k of store.listKeys(account?.id)) {
          const state = k.revokedAt ? `revoked ${k.revokedAt}` : 'active';
          const owner = store.getAccount(k.accountId)?.name ?? k.accountId;
          process.stdout.write(
            `${k.id}\t${owner}\t${k.name}\t${k.prefix}\t${state}\tlast used ${k.lastUsedAt ?? 'never'}\n`,
          );
        }
        return 0;
      }
      case 'revoke': {
        if (!arg) {
          process.stderr.write('gantry: keys revoke needs a KEY_ID (see gantry keys list)\n');
          return 2;
        }
        if (!store.revokeKey(arg)) {
          process.stderr.write(`gantry: no active key ${arg}\n`);
          return 1;
        }
        process.stdout.write(`revoked ${arg}\n`);
        return 0;
      }
      default:
        throw new CliError('keys needs create, list or revoke (gantry --help shows how)', 2);
    }
  } finally {
    store.close();
  }
}
