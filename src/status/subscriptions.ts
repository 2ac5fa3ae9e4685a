/**
 * E-mail subscriptions to the status page (README, "Status page" → e-mail): double opt-in, an unsubscribe
 * link in every mail, sent through the SMTP relay of `status_page.email`.
 *
 * STUB: replaced by the real subscriber stores and mailer.
 */
import type { PlaneDeps } from '../admin/plane.js';
import type { IncidentEvent } from './incidents.js';

export interface Subscriptions {
  /** false without `status_page.email`: the page then offers the feed only. */
  readonly enabled: boolean;
  /** Mails every confirmed subscriber about the event (off the request path). */
  notify(event: IncidentEvent): void;
  close(): Promise<void>;
}

export function createSubscriptions(_deps: PlaneDeps): Subscriptions {
  return { enabled: false, notify: () => {}, close: async () => {} };
}
