/**
 * The end of a chaos phase: wait (bounded) for every accepted prediction to end and its terminal webhook
 * to arrive, then read everything back (each prediction, the account's whole list, the webhooks received)
 * and reduce it to the figures `npm run chaos` prints. README "Development" says what each one means.
 */
import { until } from '../test/helpers/wait.js';
import type { WebhookReceiver } from '../test/helpers/webhook-receiver.js';
import { type ChaosClient, mapPool, type Sent, Tally } from './client.js';

const TERMINAL = new Set(['succeeded', 'failed', 'canceled']);
const TERMINAL_EVENTS = new Set(['prediction.succeeded', 'prediction.failed', 'prediction.canceled']);
/** Reads in flight at once while settling and reporting. */
const READS = 16;

export interface SettleOptions {
  /** Longest wait for everything to settle. */
  settleMs: number;
  /** Stop earlier once nothing changed (no status became terminal, no webhook arrived) for this long. */
  quietMs: number;
  /** How often to look. */
  everyMs: number;
}

/** Per prediction id: the webhook events received, in arrival order, and how many were badly signed. */
interface Received {
  events: Map<string, string[]>;
  badSignatures: number;
  total: number;
}

function received(receiver: WebhookReceiver): Received {
  const events = new Map<string, string[]>();
  let badSignatures = 0;
  const requests = receiver.requests;
  for (const r of requests) {
    if (r.signatureValid !== true) {
      badSignatures++;
      continue;
    }
    const id = typeof r.body?.id === 'string' ? r.body.id : undefined;
    if (id === undefined || r.event === undefined) continue;
    const list = events.get(id) ?? [];
    list.push(r.event);
    events.set(id, list);
  }
  return { events, badSignatures, total: requests.length };
}

function hasTerminalWebhook(events: string[] | undefined, status: string): boolean {
  return events?.includes(`prediction.${status}`) ?? false;
}

/**
 * Waits until every id has a terminal status and the webhook for it, the deadline passes, or nothing
 * changed for `quietMs`. Returns the last status seen of each id and how long it waited.
 */
export async function settle(
  client: ChaosClient,
  receiver: WebhookReceiver,
  ids: readonly string[],
  options: SettleOptions,
  log: (line: string) => void,
): Promise<{ statuses: Map<string, string>; waitedMs: number; settled: boolean }> {
  const statuses = new Map<string, string>();
  const begin = Date.now();
  let lastChange = Date.now();
  let pending = Number.POSITIVE_INFINITY;
  let lastLog = Date.now();
  const look = async (): Promise<boolean> => {
    const { events } = received(receiver);
    // A terminal status is final, so only ids not yet known terminal are read again.
    const unknown = ids.filter((id) => !TERMINAL.has(statuses.get(id) ?? ''));
    await mapPool(unknown, READS, async (id) => {
      const p = await client.get(id);
      if (p) statuses.set(id, p.status);
    });
    const now = ids.filter((id) => {
      const status = statuses.get(id) ?? '';
      return !TERMINAL.has(status) || !hasTerminalWebhook(events.get(id), status);
    }).length;
    if (now < pending) lastChange = Date.now();
    pending = now;
    if (Date.now() - lastLog >= 10_000) {
      lastLog = Date.now();
      log(`settling: ${pending} without a terminal status or its webhook (${seconds(Date.now() - begin)})`);
    }
    return pending === 0 || Date.now() - lastChange > options.quietMs;
  };
  try {
    await until('every prediction to settle', look, options.settleMs, options.everyMs);
  } catch {
    // The deadline passed: what is still pending is reported as it is.
  }
  return { statuses, waitedMs: Date.now() - begin, settled: pending === 0 };
}

export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

export interface Figures {
  sent: number;
  accepted: number;
  succeeded: number;
  failed: number;
  failedReasons: Tally;
  canceled: number;
  stuck: number;
  stuckStatuses: Tally;
  duplicateKeys: number;
  terminalWebhooksMissing: number;
  http500: number;
  http500Routes: Tally;
  neverAccepted: number;
  neverAcceptedReasons: Tally;
  startedWebhooksMissing: number;
  /** Succeeded predictions whose logs show more than two runs of the model ("Using seed" once per run). */
  ranMoreThanTwice: number;
  /** ... and exactly two (informative: a run cut by a crash is run again). */
  ranTwice: number;
  webhooksOutOfOrder: number;
  conflictingWebhooks: number;
  badSignatures: number;
  /** Predictions in the account's list that no create was answered with (not a figure that fails a run). */
  unclaimed: number;
  webhooksReceived: number;
}

/** The figures that must all be 0 (every figure but sent, accepted, succeeded and the informative ones). */
export const MUST_BE_ZERO: Array<[keyof Figures, string]> = [
  ['failed', 'failed'],
  ['canceled', 'canceled'],
  ['stuck', 'stuck (not terminal at the end)'],
  ['duplicateKeys', 'idempotency keys with two predictions'],
  ['terminalWebhooksMissing', 'terminal webhooks missing'],
  ['http500', 'HTTP 500s'],
  ['neverAccepted', 'creates never accepted'],
  ['startedWebhooksMissing', 'started webhooks missing (succeeded predictions)'],
  ['ranMoreThanTwice', 'predictions run more than twice'],
  ['webhooksOutOfOrder', 'webhooks out of order (started after terminal)'],
  ['conflictingWebhooks', 'predictions with two different terminal webhooks'],
  ['badSignatures', 'webhooks with a bad signature'],
];

/** Reads everything back and counts. `promptKey` maps a prediction's prompt back to its Idempotency-Key. */
export async function collect(
  client: ChaosClient,
  receiver: WebhookReceiver,
  sent: readonly Sent[],
  promptKey: (prompt: string) => string | undefined,
): Promise<Figures> {
  const accepted = sent.flatMap((s) => (s.outcome.kind === 'accepted' ? [s.outcome.id] : []));
  const neverAcceptedReasons = new Tally();
  for (const s of sent) {
    if (s.outcome.kind === 'refused')
      neverAcceptedReasons.add(`refused ${s.outcome.status} ${s.outcome.code}`);
    if (s.outcome.kind === 'gave up') neverAcceptedReasons.add(`gave up after ${s.outcome.last}`);
  }

  const views = await mapPool(accepted, READS, (id) => client.get(id));
  const failedReasons = new Tally();
  const stuckStatuses = new Tally();
  let succeeded = 0;
  let failed = 0;
  let canceled = 0;
  let stuck = 0;
  const { events, badSignatures, total } = received(receiver);
  let terminalWebhooksMissing = 0;
  let startedWebhooksMissing = 0;
  let webhooksOutOfOrder = 0;
  let conflictingWebhooks = 0;
  let ranTwice = 0;
  let ranMoreThanTwice = 0;
  accepted.forEach((id, i) => {
    const view = views[i];
    // The image model logs its seed once per run; an interrupted run may not have flushed its logs, so
    // this is a lower bound.
    const runs = view?.logs?.match(/Using seed/g)?.length ?? 0;
    if (runs === 2) ranTwice++;
    if (runs > 2) ranMoreThanTwice++;
    const status = view?.status ?? 'unreadable';
    if (status === 'succeeded') succeeded++;
    else if (status === 'failed') {
      failed++;
      failedReasons.add(view?.error ?? 'no error');
    } else if (status === 'canceled') canceled++;
    else {
      stuck++;
      stuckStatuses.add(status);
    }
    const got = events.get(id) ?? [];
    if (TERMINAL.has(status) && !hasTerminalWebhook(got, status)) terminalWebhooksMissing++;
    if (status === 'succeeded' && !got.includes('prediction.started')) startedWebhooksMissing++;
    const firstTerminal = got.findIndex((e) => TERMINAL_EVENTS.has(e));
    const firstStarted = got.indexOf('prediction.started');
    if (firstTerminal >= 0 && firstStarted > firstTerminal) webhooksOutOfOrder++;
    if (new Set(got.filter((e) => TERMINAL_EVENTS.has(e))).size > 1) conflictingWebhooks++;
  });

  // Two predictions for one Idempotency-Key show up only in the account's list: the client saw one.
  const listed = (await client.listAll()) ?? [];
  const perKey = new Map<string, number>();
  const acceptedIds = new Set(accepted);
  let unclaimed = 0;
  for (const p of listed) {
    const key = promptKey(p.input?.prompt ?? '');
    if (key !== undefined) perKey.set(key, (perKey.get(key) ?? 0) + 1);
    if (!acceptedIds.has(p.id)) unclaimed++;
  }
  const duplicateKeys = [...perKey.values()].filter((n) => n > 1).length;

  return {
    sent: sent.length,
    accepted: accepted.length,
    succeeded,
    failed,
    failedReasons,
    canceled,
    stuck,
    stuckStatuses,
    duplicateKeys,
    terminalWebhooksMissing,
    http500: client.http500.total,
    http500Routes: client.http500,
    neverAccepted: sent.length - accepted.length,
    neverAcceptedReasons,
    startedWebhooksMissing,
    ranTwice,
    ranMoreThanTwice,
    webhooksOutOfOrder,
    conflictingWebhooks,
    badSignatures,
    unclaimed,
    webhooksReceived: total,
  };
}

/** The figures as printed; the second value is true when every must-be-zero figure is 0. */
export function formatFigures(title: string, f: Figures): { text: string; clean: boolean } {
  const lines = [`${title}`];
  const row = (label: string, value: number, detail = '') =>
    lines.push(`  ${label.padEnd(52)}${String(value).padStart(6)}${detail ? `   ${detail}` : ''}`);
  row('sent', f.sent);
  row('accepted', f.accepted);
  row('succeeded', f.succeeded);
  const details: Partial<Record<keyof Figures, string>> = {
    failed: f.failedReasons.describe(),
    stuck: f.stuckStatuses.describe(),
    http500: f.http500Routes.describe(),
    neverAccepted: f.neverAcceptedReasons.describe(),
  };
  let clean = true;
  for (const [name, label] of MUST_BE_ZERO) {
    const value = f[name] as number;
    if (value !== 0) clean = false;
    row(label, value, value !== 0 ? (details[name] ?? '') : '');
  }
  row('(info) predictions run twice', f.ranTwice);
  row('(info) predictions listed that no create returned', f.unclaimed);
  row('(info) webhook deliveries received', f.webhooksReceived);
  return { text: lines.join('\n'), clean };
}
