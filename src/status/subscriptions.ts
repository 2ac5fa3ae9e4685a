/**
 * E-mail subscriptions to the status page (README, "Status page" → "E-mail subscriptions"): double opt-in,
 * an unsubscribe link in every mail, sent through the SMTP relay of `status_page.email`.
 *
 * Subscribers live in the mode's store (SQLite table, or Redis shared by every instance). Confirmation
 * tokens are random and stored hashed; unsubscribe tokens are `<subscriber id>.<HMAC>` under the secret
 * key (GANTRY_SECRET_KEY), so nothing usable sits in the store and every instance accepts them.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { PlaneDeps } from '../admin/plane.js';
import type { IncidentEvent } from './incidents.js';
import { confirmationMail, incidentMail, type MailLinks } from './mail-content.js';
import {
  describeMailError,
  MailQueue,
  type MailQueueOptions,
  type MailTransport,
  smtpSecrets,
  smtpTransport,
} from './mailer.js';
import { hashToken, newToken, normaliseEmail, type SubscriberStore } from './subscribers.js';
import { RedisSubscriberStore } from './subscribers-redis.js';
import { SqliteSubscriberStore } from './subscribers-sqlite.js';

export type SubscribeOutcome = 'accepted' | 'invalid' | 'rate_limited';
export type UnsubscribeState = 'subscribed' | 'gone' | 'invalid';

export interface Subscriptions {
  /** false without `status_page.email`: the page then offers the feed only. */
  readonly enabled: boolean;
  /** Mails every confirmed subscriber about the event (off the request path). */
  notify(event: IncidentEvent): void;
  /**
   * Records a pending subscription and mails its confirmation link. `accepted` whether the address was
   * new, pending or confirmed, and also when the address's own limit was reached (nothing is mailed then):
   * the answer never tells who subscribed. `rate_limited` is the caller's IP over its limit.
   */
  subscribe(email: unknown, ip: string): Promise<SubscribeOutcome>;
  /** Whether a confirmation token is valid (the page shown before the POST). Changes nothing. */
  checkConfirm(token: unknown): Promise<boolean>;
  confirm(token: unknown): Promise<boolean>;
  /** `gone`: a well-formed link whose subscriber is no longer there (already unsubscribed or expired). */
  checkUnsubscribe(token: unknown): Promise<UnsubscribeState>;
  /** `subscribed` when this call removed the subscriber. */
  unsubscribe(token: unknown): Promise<UnsubscribeState>;
  /** Resolves once no mail is waiting, in flight or due for a retry (tests, shutdown). */
  idle(): Promise<void>;
  close(): Promise<void>;
}

export interface SubscriptionLimits {
  /** How long a confirmation link works; the pending record goes with it. */
  pendingMs: number;
  /** Subscribe requests per IP per window (answered 429 beyond). */
  perIp: number;
  /** Confirmation mails per address per window (silently not sent beyond). */
  perAddress: number;
  windowMs: number;
}

export const DEFAULT_LIMITS: SubscriptionLimits = {
  pendingMs: 48 * 3_600_000,
  perIp: 10,
  perAddress: 3,
  windowMs: 3_600_000,
};

export interface SubscriptionOptions {
  limits?: Partial<SubscriptionLimits>;
  /** Instead of the SMTP relay (tests). */
  transport?: MailTransport;
  mail?: Partial<Pick<MailQueueOptions, 'concurrency' | 'maxAttempts' | 'backoff'>>;
  store?: SubscriberStore;
}

const PURGE_EVERY_MS = 10 * 60_000;
const MAC_CHARS = 32;

const DISABLED: Subscriptions = {
  enabled: false,
  notify: () => {},
  subscribe: async () => 'invalid',
  checkConfirm: async () => false,
  confirm: async () => false,
  checkUnsubscribe: async () => 'invalid',
  unsubscribe: async () => 'invalid',
  idle: async () => {},
  close: async () => {},
};

export function createSubscriptions(
  deps: PlaneDeps,
  secretKey: Buffer,
  options: SubscriptionOptions = {},
): Subscriptions {
  const email = deps.config.web.statusPage.email;
  if (!email) return DISABLED;
  const limits = { ...DEFAULT_LIMITS, ...options.limits };
  const concurrency = options.mail?.concurrency ?? 4;
  const store =
    options.store ??
    (deps.redis ? new RedisSubscriberStore(deps.redis) : new SqliteSubscriberStore(deps.store.handle));
  const secrets = smtpSecrets(email.smtpUrl);
  const onTransportError = (error: Error) =>
    deps.log.warn(describeMailError(error, secrets), 'status mail relay connection failed');
  const queue = new MailQueue({
    from: email.from,
    transport: options.transport ?? smtpTransport(email.smtpUrl, concurrency, onTransportError),
    log: deps.log,
    secrets,
    concurrency,
    ...(options.mail?.maxAttempts === undefined ? {} : { maxAttempts: options.mail.maxAttempts }),
    ...(options.mail?.backoff === undefined ? {} : { backoff: options.mail.backoff }),
  });
  const macKey = createHmac('sha256', secretKey).update('gantry-status-unsubscribe').digest();
  const mac = (id: string) => createHmac('sha256', macKey).update(id).digest('base64url').slice(0, MAC_CHARS);
  const unsubscribeToken = (id: string) => `${id}.${mac(id)}`;
  /** The subscriber id an unsubscribe token names, when its MAC holds. */
  const unsubscribeId = (token: unknown): string | undefined => {
    if (typeof token !== 'string' || token.length > 100) return undefined;
    const dot = token.indexOf('.');
    if (dot < 1) return undefined;
    const id = token.slice(0, dot);
    const given = Buffer.from(token.slice(dot + 1));
    const expected = Buffer.from(mac(id));
    return given.length === expected.length && timingSafeEqual(given, expected) ? id : undefined;
  };
  const confirmHash = (token: unknown): string | undefined =>
    typeof token === 'string' && /^[A-Za-z0-9_-]{20,100}$/.test(token) ? hashToken(token) : undefined;
  const links = (id: string): MailLinks => ({
    origin: deps.publicUrl(),
    unsubscribeToken: unsubscribeToken(id),
  });

  const purge = () =>
    store
      .purgeExpired(Date.now())
      .catch((error: Error) =>
        deps.log.warn({ err: error.message }, 'status subscribers: purging expired ones failed'),
      );
  void purge();
  const purgeTimer = setInterval(purge, PURGE_EVERY_MS);
  purgeTimer.unref();

  const fanOut = async (event: IncidentEvent) => {
    const subscribers = await store.listConfirmed();
    for (const s of subscribers) queue.enqueue(incidentMail(s.email, event, links(s.id)));
    deps.log.info(
      { incident: event.incident.id, kind: event.kind, recipients: subscribers.length },
      'status mails queued',
    );
  };

  return {
    enabled: true,
    notify(event) {
      fanOut(event).catch((error: Error) =>
        deps.log.error(
          { incident: event.incident.id, kind: event.kind, err: error.message },
          'status mails not queued: the subscribers could not be read',
        ),
      );
    },
    async subscribe(input, ip) {
      const address = normaliseEmail(input);
      if (!address) return 'invalid';
      const now = Date.now();
      if ((await store.hit(`ip:${ip}`, limits.windowMs, now)) > limits.perIp) return 'rate_limited';
      if ((await store.hit(`address:${address}`, limits.windowMs, now)) > limits.perAddress)
        return 'accepted';
      const { token, hash } = newToken();
      const result = await store.upsertPending(address, hash, now + limits.pendingMs, now);
      // A confirmed address gets nothing: the answer is the same, and its owner already receives the mails.
      if (result.state === 'pending') {
        const hours = Math.round(limits.pendingMs / 3_600_000);
        queue.enqueue(confirmationMail(address, token, hours, links(result.id)));
      }
      return 'accepted';
    },
    async checkConfirm(token) {
      const hash = confirmHash(token);
      return hash !== undefined && (await store.findPending(hash, Date.now())) !== undefined;
    },
    async confirm(token) {
      const hash = confirmHash(token);
      if (hash === undefined) return false;
      const subscriber = await store.confirm(hash, Date.now());
      return subscriber !== undefined;
    },
    async checkUnsubscribe(token) {
      const id = unsubscribeId(token);
      if (id === undefined) return 'invalid';
      return (await store.get(id)) ? 'subscribed' : 'gone';
    },
    async unsubscribe(token) {
      const id = unsubscribeId(token);
      if (id === undefined) return 'invalid';
      return (await store.remove(id)) ? 'subscribed' : 'gone';
    },
    idle: () => queue.whenIdle(),
    async close() {
      clearInterval(purgeTimer);
      await queue.close();
      await store.close();
    },
  };
}
