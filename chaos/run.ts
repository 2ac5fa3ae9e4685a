/**
 * `npm run chaos`: does every accepted prediction and every webhook survive kill -9 of any part?
 *
 * Distributed mode: a redis-server with AOF (appendfsync always) in a temp dir on a random port, 2 api and
 * 2 worker instances of the compiled Gantry (bin/gantry.js) sharing GANTRY_SECRET_KEY and the files dir,
 * a webhook receiver on 127.0.0.1 that checks every signature with the standardwebhooks package, and a
 * paced load of predictions on the built-in image model, each with a webhook and an Idempotency-Key,
 * round robin over the api instances with a client that retries (chaos/client.ts). Mid-run it SIGKILLs
 * each worker in turn, then an api instance, then Redis, restarting each after a moment (Redis on the same
 * port and dir, so AOF restores it). Embedded mode: one `gantry serve` (role all, no Redis) under a
 * smaller load, SIGKILLed and restarted on the same data dir mid-run.
 *
 * After each phase it waits (bounded) for every accepted prediction to end and its webhooks to arrive,
 * then prints the figures of chaos/report.ts. The exit code is 0 only when every figure but sent,
 * accepted and succeeded is 0. Everything runs on 127.0.0.1; processes and temp dirs are removed on every
 * way out (normal end, error, SIGINT, SIGTERM). `--help` lists the flags. README "Development" documents it.
 */
import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { type GantryProcess, spawnGantry, stopAllGantry } from '../test/helpers/gantry-process.js';
import { freePort } from '../test/helpers/ports.js';
import { redisServerAvailable, startRedis, type TestRedis } from '../test/helpers/redis.js';
import { removeTempDirs, tempDir } from '../test/helpers/temp-dirs.js';
import { sleep, until } from '../test/helpers/wait.js';
import { startWebhookReceiver, type WebhookReceiver } from '../test/helpers/webhook-receiver.js';
import { ChaosClient, type LoadProgress, runLoad } from './client.js';
import { applySetting, chaosConfig, IMAGE_MODEL, writeConfig } from './config.js';
import { collect, formatFigures, seconds, settle } from './report.js';

const HELP = `npm run chaos -- [flags]

  --predictions N              predictions in distributed mode (1000)
  --embedded-predictions N     predictions in embedded mode (300)
  --mode both|distributed|embedded   which phases to run (both)
  --rate N                     creates started per second (25)
  --concurrency N              creates in flight at most, retries included (32)
  --image-side N               width and height of each picture, 64-2048 (64: the fastest)
  --kill LIST                  which parts die in distributed mode: worker,api,redis (all three)
  --worker-kills N             how many times a worker is killed, alternating between the two (2)
  --restart-delay-seconds S    how long a killed worker or api instance stays down (2)
  --redis-outage-seconds S     how long Redis stays down (10)
  --settle-seconds S           longest wait, after the load, for every prediction and webhook (180)
  --quiet-seconds S            stop waiting earlier once nothing changed for this long (75; it must
                               exceed Gantry's recovery delays: BullMQ's lock, the 30 s sweeps)
  --create-deadline-seconds S  how long one create keeps retrying (120)
  --request-timeout-seconds S  the client's timeout of one request (30)
  --set path=value             set a key of the gantry.yaml the run writes (repeatable), e.g.
                               --set predictions.concurrency=4
  --keep                       keep the temp dirs (config, data, logs) and print where they are
`;

const { values } = parseArgs({
  options: {
    predictions: { type: 'string', default: '1000' },
    'embedded-predictions': { type: 'string', default: '300' },
    mode: { type: 'string', default: 'both' },
    rate: { type: 'string', default: '25' },
    concurrency: { type: 'string', default: '32' },
    'image-side': { type: 'string', default: '64' },
    kill: { type: 'string', default: 'worker,api,redis' },
    'worker-kills': { type: 'string', default: '2' },
    'restart-delay-seconds': { type: 'string', default: '2' },
    'redis-outage-seconds': { type: 'string', default: '10' },
    'settle-seconds': { type: 'string', default: '180' },
    'quiet-seconds': { type: 'string', default: '75' },
    'create-deadline-seconds': { type: 'string', default: '120' },
    'request-timeout-seconds': { type: 'string', default: '30' },
    set: { type: 'string', multiple: true, default: [] },
    keep: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (values.help) {
  process.stdout.write(HELP);
  process.exit(0);
}

function number(name: keyof typeof values, min: number, max: number): number {
  const value = Number(values[name]);
  if (!Number.isFinite(value) || value < min || value > max) {
    process.stderr.write(`chaos: --${name} must be a number from ${min} to ${max}\n`);
    process.exit(2);
  }
  return value;
}

const settings = {
  predictions: number('predictions', 1, 100_000),
  embeddedPredictions: number('embedded-predictions', 1, 100_000),
  rate: number('rate', 1, 10_000),
  concurrency: number('concurrency', 1, 1_000),
  imageSide: number('image-side', 64, 2048),
  workerKills: number('worker-kills', 0, 20),
  restartDelayMs: number('restart-delay-seconds', 0, 600) * 1000,
  redisOutageMs: number('redis-outage-seconds', 0, 600) * 1000,
  settleMs: number('settle-seconds', 1, 3600) * 1000,
  quietMs: number('quiet-seconds', 1, 3600) * 1000,
  createDeadlineMs: number('create-deadline-seconds', 1, 3600) * 1000,
  requestTimeoutMs: number('request-timeout-seconds', 1, 600) * 1000,
};
const killed = new Set(values.kill.split(',').filter(Boolean));
for (const part of killed) {
  if (part !== 'worker' && part !== 'api' && part !== 'redis') {
    process.stderr.write(`chaos: --kill takes worker, api and redis, not "${part}"\n`);
    process.exit(2);
  }
}
const mode = values.mode;
if (mode !== 'both' && mode !== 'distributed' && mode !== 'embedded') {
  process.stderr.write('chaos: --mode must be both, distributed or embedded\n');
  process.exit(2);
}

const begin = Date.now();
function log(line: string): void {
  process.stdout.write(`[${seconds(Date.now() - begin).padStart(7)}] ${line}\n`);
}

// ---------------------------------------------------------------------------------------------------
// Processes, and their removal on every way out
// ---------------------------------------------------------------------------------------------------

/** 32 bytes as 64 hex characters; shared by every instance (webhook secrets, sealed data, file links). */
const SECRET_KEY = randomBytes(32).toString('hex');
/** The key every instance registers for the `default` account (GANTRY_BOOTSTRAP_KEY). */
const API_KEY = `gty_chaos_${randomBytes(24).toString('hex')}`;

const logDir = tempDir('gantry-chaos-logs-');
let redis: TestRedis | undefined;
const receivers: WebhookReceiver[] = [];

/** One Gantry instance that can be killed and started again with the same port, data dir and role. */
class Member {
  proc: GantryProcess | undefined;
  private runs = 0;
  constructor(
    readonly name: string,
    private readonly config: string,
    private readonly dataDir: string,
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  async start(): Promise<void> {
    this.runs++;
    const proc = await spawnGantry({
      name: this.name,
      config: this.config,
      dataDir: this.dataDir,
      built: true,
      startTimeoutMs: 60_000,
      env: { ...this.env, GANTRY_SECRET_KEY: SECRET_KEY, GANTRY_BOOTSTRAP_KEY: API_KEY },
    });
    const run = this.runs;
    // Each run's output goes to its own log file once it ends (kept with --keep).
    void proc.exited.then(() => {
      try {
        writeFileSync(join(logDir, `${this.name}.${run}.log`), proc.output());
      } catch {
        // The log dir is already gone (the run is ending).
      }
    });
    this.proc = proc;
  }

  async kill(): Promise<void> {
    const proc = this.proc;
    if (!proc) return;
    proc.kill('SIGKILL');
    await proc.exited;
  }
}

let cleaned = false;
async function cleanup(): Promise<void> {
  if (cleaned) return;
  cleaned = true;
  await stopAllGantry(3_000);
  await Promise.all(receivers.map((r) => r.close()));
  if (values.keep) {
    await redis?.kill();
    log(
      `kept: logs in ${logDir}${redis ? `, Redis data in ${redis.dir}` : ''} (and the other gantry-chaos-* dirs)`,
    );
  } else {
    await redis?.close();
    removeTempDirs();
  }
}

// SIGKILL whatever is left if the process ends by another path (gantry-process kills its own children).
process.once('exit', () => {
  if (cleaned) return;
  void redis?.kill(); // sends SIGKILL before its first await
  if (!values.keep) {
    if (redis) rmSync(redis.dir, { recursive: true, force: true });
    removeTempDirs();
  }
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping every process and removing the temp dirs`);
    void cleanup().finally(() => process.exit(130));
  });
}

// ---------------------------------------------------------------------------------------------------
// One phase: load, kills on a schedule, settle, figures
// ---------------------------------------------------------------------------------------------------

interface Kill {
  at: number;
  target: string;
  down(): Promise<void>;
  downMs: number;
  up(): Promise<void>;
}

/** A kill -9 of an instance, started again with the same port and data dir. */
function killMember(m: Member, at: number): Kill {
  return { at, target: m.name, down: () => m.kill(), downMs: settings.restartDelayMs, up: () => m.start() };
}

interface Phase {
  title: string;
  count: number;
  apiOrigins: string[];
  receiver: WebhookReceiver;
  /** Kills run when this fraction of the creates has started, in order; `up` runs `downMs` later. */
  kills: Kill[];
  prefix: string;
}

async function webhookSecret(origin: string): Promise<string> {
  const res = await fetch(`${origin}/v1/webhooks/secret`, { headers: { 'x-api-key': API_KEY } });
  const body = (await res.json()) as { key?: string };
  if (res.status !== 200 || !body.key) throw new Error(`GET /v1/webhooks/secret: ${res.status}`);
  return body.key;
}

async function runPhase(phase: Phase): Promise<boolean> {
  const client = new ChaosClient(phase.apiOrigins, API_KEY, settings.requestTimeoutMs);
  const progress: LoadProgress = { started: 0, done: false };
  const prompt = (key: string) => `chaos ${key}`;
  const key = (index: number) => `${phase.prefix}-${String(index).padStart(6, '0')}`;
  log(`${phase.title}: ${phase.count} predictions at ${settings.rate}/s`);
  const loadStart = Date.now();
  const loading = runLoad(
    client,
    {
      count: phase.count,
      rate: settings.rate,
      concurrency: settings.concurrency,
      createDeadlineMs: settings.createDeadlineMs,
      key,
      body: (index, k) => ({
        model: IMAGE_MODEL,
        input: {
          prompt: prompt(k),
          width: settings.imageSide,
          height: settings.imageSide,
          output_format: 'jpg',
          seed: index,
        },
        webhook: { url: phase.receiver.url },
      }),
    },
    progress,
  );
  // A part killed comes back in the background, so a slow start does not push the next kills past the
  // end of the load; a part is killed again only once it is back.
  const comebacks = new Map<string, Promise<void>>();
  const chaos = (async () => {
    for (const kill of phase.kills) {
      await until(
        `${Math.round(kill.at * 100)} % of the creates`,
        () => progress.done || progress.started >= kill.at * phase.count,
        24 * 3600_000,
        50,
      );
      await comebacks.get(kill.target);
      log(
        `SIGKILL ${kill.target} (${progress.started} creates started${progress.done ? ', load over' : ''})`,
      );
      await kill.down();
      comebacks.set(
        kill.target,
        sleep(kill.downMs).then(async () => {
          await kill.up();
          log(`${kill.target} restarted`);
        }),
      );
    }
    await Promise.all(comebacks.values());
  })();
  const [sent] = await Promise.all([loading, chaos]);
  const accepted = sent.flatMap((s) => (s.outcome.kind === 'accepted' ? [s.outcome.id] : []));
  log(
    `load done in ${seconds(Date.now() - loadStart)}: ${accepted.length} of ${sent.length} accepted, ` +
      `${client.retries} retries, ${client.replayed} replayed, slowest create answer ${seconds(client.slowestCreateMs)}; ` +
      `transport errors: ${client.transport.describe() || 'none'}`,
  );
  const settled = await settle(
    client,
    phase.receiver,
    accepted,
    { settleMs: settings.settleMs, quietMs: settings.quietMs, everyMs: 1_000 },
    log,
  );
  log(
    settled.settled
      ? `settled after ${seconds(settled.waitedMs)}`
      : `stopped waiting after ${seconds(settled.waitedMs)} with predictions or webhooks still pending`,
  );
  const byKey = new Map(sent.map((s) => [prompt(s.key), s.key]));
  const figures = await collect(client, phase.receiver, sent, (p) => byKey.get(p));
  const { text, clean } = formatFigures(phase.title, figures);
  process.stdout.write(`\n${text}\n  (info) answers: ${client.answers.describe(12)}\n\n`);
  return clean;
}

async function distributed(): Promise<boolean> {
  if (!redisServerAvailable)
    throw new Error('redis-server is not installed (apt-get install -y redis-server)');
  redis = await startRedis({ aof: true });
  const r = redis;
  log(`redis-server with AOF on port ${r.port} (${r.dir})`);
  const filesDir = tempDir('gantry-chaos-files-');
  const config = join(tempDir('gantry-chaos-config-'), 'gantry.yaml');
  const tree = chaosConfig(filesDir);
  for (const setting of values.set) applySetting(tree, setting);
  writeConfig(config, tree);

  const ports = [await freePort(), await freePort()];
  const origins = ports.map((p) => `http://127.0.0.1:${p}`);
  // Workers write absolute links into webhooks: they point at the first api instance.
  const shared = { REDIS_URL: r.url, GANTRY_PUBLIC_URL: origins[0] };
  const member = (name: string, role: string, port: number) =>
    new Member(name, config, tempDir(`gantry-chaos-${name}-`), {
      ...shared,
      GANTRY_ROLE: role,
      PORT: String(port),
    });
  const apis = ports.map((port, i) => member(`api-${i + 1}`, 'api', port));
  const workers = [member('worker-1', 'worker', 0), member('worker-2', 'worker', 0)];
  await Promise.all([...apis, ...workers].map((m) => m.start()));
  log('2 api + 2 worker instances listening');

  const receiver = await startWebhookReceiver({ secret: await webhookSecret(origins[0] as string) });
  receivers.push(receiver);
  return runPhase({
    title: `distributed: 2 api + 2 worker instances, Redis with AOF`,
    count: settings.predictions,
    apiOrigins: origins,
    receiver,
    prefix: `d-${randomBytes(4).toString('hex')}`,
    kills: [
      // Worker kills between 15 % and 35 % of the creates, one worker then the other.
      ...Array.from({ length: killed.has('worker') ? settings.workerKills : 0 }, (_, k) =>
        killMember(
          workers[k % 2] as Member,
          0.15 + (settings.workerKills > 1 ? (0.2 * k) / (settings.workerKills - 1) : 0),
        ),
      ),
      ...(killed.has('api') ? [killMember(apis[1] as Member, 0.4)] : []),
      ...(killed.has('redis')
        ? [
            {
              at: 0.65,
              target: 'redis-server',
              down: () => r.kill(),
              downMs: settings.redisOutageMs,
              up: () => r.start(),
            },
          ]
        : []),
    ],
  });
}

async function embedded(): Promise<boolean> {
  const dataDir = tempDir('gantry-chaos-embedded-');
  const config = join(tempDir('gantry-chaos-config-'), 'gantry.yaml');
  const tree = chaosConfig(join(dataDir, 'files'));
  for (const setting of values.set) applySetting(tree, setting);
  writeConfig(config, tree);
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const all = new Member('embedded', config, dataDir, { GANTRY_ROLE: 'all', PORT: String(port) });
  await all.start();
  log('embedded instance listening (role all, no Redis)');
  const receiver = await startWebhookReceiver({ secret: await webhookSecret(origin) });
  receivers.push(receiver);
  return runPhase({
    title: 'embedded: one instance (role all, SQLite), no Redis',
    count: settings.embeddedPredictions,
    apiOrigins: [origin],
    receiver,
    prefix: `e-${randomBytes(4).toString('hex')}`,
    kills: [killMember(all, 0.4)],
  });
}

let exitCode = 1;
try {
  const results: boolean[] = [];
  if (mode !== 'embedded') {
    results.push(await distributed());
    await stopAllGantry(3_000);
  }
  if (mode !== 'distributed') results.push(await embedded());
  exitCode = results.every(Boolean) ? 0 : 1;
  log(
    exitCode === 0
      ? 'PASS: every figure but sent, accepted and succeeded is 0'
      : 'FAIL: some figure that must be 0 is not (see above)',
  );
} catch (err) {
  log(`chaos run failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  exitCode = 2;
} finally {
  await cleanup();
}
process.exit(exitCode);
