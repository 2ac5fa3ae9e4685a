/**
 * Sending the status page's mails (README, "Status page" → "E-mail subscriptions"): a queue in memory,
 * off the request path, a cap on sends in flight, retries with backoff on temporary failures. Log lines
 * name the recipient masked and never carry the relay's credentials.
 */
import nodemailer from 'nodemailer';
import type { PlaneLog } from '../admin/plane.js';
import { type BackoffPolicy, nextDelayMs } from '../backoff.js';
import { maskEmail } from './subscribers.js';

export interface OutgoingMail {
  to: string;
  subject: string;
  text: string;
  html: string;
  headers: Record<string, string>;
}

/** What the queue needs of a nodemailer transport (tests may pass their own). */
export interface MailTransport {
  sendMail(mail: OutgoingMail & { from: string }): Promise<unknown>;
  close(): void;
}

export interface MailQueueOptions {
  from: string;
  transport: MailTransport;
  log: PlaneLog;
  /** Sends in flight at once. */
  concurrency?: number;
  /** Tries per mail, the first included. */
  maxAttempts?: number;
  backoff?: BackoffPolicy;
  /** Mails waiting beyond this are dropped (and logged): an unreachable relay must not grow memory without bound. */
  maxQueued?: number;
  /** Strings never to log (the relay's user name and password). */
  secrets?: string[];
}

interface Job {
  mail: OutgoingMail;
  attempt: number;
}

export const DEFAULT_MAIL_BACKOFF: BackoffPolicy = { baseMs: 2_000, maxMs: 5 * 60_000 };

export class MailQueue {
  private readonly waiting: Job[] = [];
  private readonly retries = new Set<NodeJS.Timeout>();
  private active = 0;
  private closed = false;
  private idleWaiters: Array<() => void> = [];
  private readonly concurrency: number;
  private readonly maxAttempts: number;
  private readonly backoff: BackoffPolicy;
  private readonly maxQueued: number;
  private readonly secrets: string[];

  constructor(private readonly options: MailQueueOptions) {
    this.concurrency = Math.max(1, options.concurrency ?? 4);
    this.maxAttempts = Math.max(1, options.maxAttempts ?? 6);
    this.backoff = options.backoff ?? DEFAULT_MAIL_BACKOFF;
    this.maxQueued = options.maxQueued ?? 10_000;
    this.secrets = (options.secrets ?? []).filter((s) => s.length >= 3);
  }

  /** Queues a mail; false (and a log line) when the queue is full or closed. */
  enqueue(mail: OutgoingMail): boolean {
    if (this.closed) return false;
    if (this.waiting.length >= this.maxQueued) {
      this.options.log.error({ to: maskEmail(mail.to) }, 'status mail dropped: the send queue is full');
      return false;
    }
    this.waiting.push({ mail, attempt: 1 });
    this.pump();
    return true;
  }

  /** Resolves once nothing is waiting, in flight or scheduled for a retry. */
  whenIdle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Stops sending: queued mails and scheduled retries are dropped, sends in flight finish. */
  async close(): Promise<void> {
    this.closed = true;
    const dropped = this.waiting.length + this.retries.size;
    this.waiting.length = 0;
    for (const timer of this.retries) clearTimeout(timer);
    this.retries.clear();
    if (dropped > 0) this.options.log.warn({ dropped }, 'status mails not sent: shutting down');
    if (this.active > 0) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    this.options.transport.close();
  }

  private isIdle(): boolean {
    return this.active === 0 && this.waiting.length === 0 && this.retries.size === 0;
  }

  private pump(): void {
    while (!this.closed && this.active < this.concurrency && this.waiting.length > 0) {
      const job = this.waiting.shift() as Job;
      this.active += 1;
      void this.send(job).finally(() => {
        this.active -= 1;
        this.pump();
        if (this.isIdle() || (this.closed && this.active === 0)) {
          const waiters = this.idleWaiters;
          this.idleWaiters = [];
          for (const resolve of waiters) resolve();
        }
      });
    }
  }

  private async send(job: Job): Promise<void> {
    const { log, from, transport } = this.options;
    try {
      await transport.sendMail({ ...job.mail, from });
      log.debug({ to: maskEmail(job.mail.to), attempt: job.attempt }, 'status mail sent');
    } catch (error) {
      const detail = describeMailError(error, this.secrets, job.mail.to);
      const permanent = isPermanent(error);
      if (permanent || job.attempt >= this.maxAttempts || this.closed) {
        log.error(
          { to: maskEmail(job.mail.to), attempt: job.attempt, ...detail },
          permanent ? 'status mail refused by the relay' : 'status mail not sent: giving up',
        );
        return;
      }
      const delayMs = nextDelayMs(job.attempt, this.backoff);
      log.warn(
        { to: maskEmail(job.mail.to), attempt: job.attempt, retry_in_ms: delayMs, ...detail },
        'status mail not sent: retrying',
      );
      const timer = setTimeout(() => {
        this.retries.delete(timer);
        this.waiting.push({ mail: job.mail, attempt: job.attempt + 1 });
        this.pump();
      }, delayMs);
      timer.unref();
      this.retries.add(timer);
    }
  }
}

/** An error for a log line: its code and SMTP reply, without credentials or the full address. */
export function describeMailError(
  error: unknown,
  secrets: readonly string[],
  to?: string,
): Record<string, unknown> {
  const e = (error ?? {}) as { code?: unknown; responseCode?: unknown; message?: unknown };
  let message = typeof e.message === 'string' ? e.message : String(error);
  for (const secret of secrets) if (secret.length >= 3) message = message.split(secret).join('[redacted]');
  // Relays echo the recipient in their replies ("550 <bob@example.com>: no such user").
  if (to) message = message.split(to).join(maskEmail(to));
  return {
    err: message.slice(0, 300),
    ...(typeof e.code === 'string' ? { code: e.code } : {}),
    ...(typeof e.responseCode === 'number' ? { smtp_code: e.responseCode } : {}),
  };
}

/** A 5xx reply will not change by trying again (a 4xx, a timeout or a lost connection may). */
function isPermanent(error: unknown): boolean {
  const code = (error as { responseCode?: unknown } | null)?.responseCode;
  return typeof code === 'number' && code >= 500 && code < 600;
}

/**
 * A pooled nodemailer transport to `smtpUrl` (smtp:// or smtps://, credentials in the URL). `onError`
 * gets the pool's own errors (outside any send), which would otherwise end the process.
 */
export function smtpTransport(
  smtpUrl: string,
  maxConnections: number,
  onError: (error: Error) => void,
): MailTransport {
  const transport = nodemailer.createTransport({
    url: smtpUrl,
    pool: true,
    maxConnections,
    connectionTimeout: 10_000,
    greetingTimeout: 10_000,
    socketTimeout: 30_000,
    // nodemailer's own logging would print the SMTP dialogue, AUTH included.
    logger: false,
    debug: false,
  });
  transport.on('error', onError);
  return {
    sendMail: (mail) => transport.sendMail(mail),
    close: () => transport.close(),
  };
}

/** The user name and password in an SMTP URL, raw and decoded: what log lines must never show. */
export function smtpSecrets(smtpUrl: string): string[] {
  try {
    const url = new URL(smtpUrl);
    const parts = [url.username, url.password];
    return [...parts, ...parts.map((p) => decodeURIComponent(p))].filter((p) => p !== '');
  } catch {
    return [];
  }
}
