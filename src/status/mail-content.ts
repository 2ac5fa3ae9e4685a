/**
 * The status page's mails: the confirmation of a subscription and one per incident event. Each carries
 * its unsubscribe link in the body and in `List-Unsubscribe`, with `List-Unsubscribe-Post` so mail
 * clients can unsubscribe with one click (RFC 8058: a POST to the link, no page in between).
 */
import type { IncidentEvent, IncidentImpact, IncidentStatus } from './incidents.js';
import type { OutgoingMail } from './mailer.js';
import { escapeMarkup } from './render.js';

export interface MailLinks {
  /** The public origin, no trailing slash. */
  origin: string;
  /** The token of this subscriber's unsubscribe link. */
  unsubscribeToken: string;
}

export const CONFIRM_PATH = '/status/subscribe/confirm';
export const UNSUBSCRIBE_PATH = '/status/unsubscribe';

export function unsubscribeUrl(links: MailLinks): string {
  return `${links.origin}${UNSUBSCRIBE_PATH}?token=${encodeURIComponent(links.unsubscribeToken)}`;
}

function listHeaders(links: MailLinks): Record<string, string> {
  return {
    'List-Unsubscribe': `<${unsubscribeUrl(links)}>`,
    'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
    // Automatic mail: no vacation replies (RFC 3834).
    'Auto-Submitted': 'auto-generated',
  };
}

/** Subjects are one line whatever an incident's title holds. */
function oneLine(text: string): string {
  return text.replace(/[\r\n\t]+/g, ' ').trim();
}

function htmlMail(title: string, paragraphs: string[]): string {
  return [
    '<!doctype html><html lang="en"><head><meta charset="utf-8">',
    `<title>${escapeMarkup(title)}</title></head>`,
    '<body style="font:16px/1.5 system-ui,sans-serif;color:#1a1a1a">',
    ...paragraphs,
    '</body></html>',
  ].join('');
}

function link(href: string, label: string): string {
  return `<a href="${escapeMarkup(href)}">${escapeMarkup(label)}</a>`;
}

export function confirmationMail(
  to: string,
  confirmToken: string,
  validHours: number,
  links: MailLinks,
): OutgoingMail {
  const confirm = `${links.origin}${CONFIRM_PATH}?token=${encodeURIComponent(confirmToken)}`;
  const unsubscribe = unsubscribeUrl(links);
  const subject = 'Confirm your subscription to status updates';
  const text = [
    `Someone, hopefully you, asked to receive status updates of ${links.origin}/status at this address.`,
    '',
    `To confirm, open this link within ${validHours} hours and press the button on the page:`,
    confirm,
    '',
    'If you did not ask for this, ignore this mail: nothing will be sent to you.',
    `To forget this address now: ${unsubscribe}`,
    '',
  ].join('\n');
  const html = htmlMail(subject, [
    `<p>Someone, hopefully you, asked to receive status updates of ${link(`${links.origin}/status`, `${links.origin}/status`)} at this address.</p>`,
    `<p>To confirm, open this link within ${validHours} hours and press the button on the page:<br>${link(confirm, 'Confirm my subscription')}</p>`,
    '<p>If you did not ask for this, ignore this mail: nothing will be sent to you.</p>',
    `<p>${link(unsubscribe, 'Forget this address now')}</p>`,
  ]);
  return { to, subject, text, html, headers: listHeaders(links) };
}

const STATUS_LABEL: Record<IncidentStatus, string> = {
  investigating: 'Investigating',
  identified: 'Identified',
  monitoring: 'Monitoring',
  resolved: 'Resolved',
};

const IMPACT_LABEL: Record<IncidentImpact, string> = {
  degraded: 'Degraded',
  offline: 'Offline',
  maintenance: 'Maintenance',
};

const KIND_LABEL: Record<IncidentEvent['kind'], string> = {
  opened: 'New incident',
  updated: 'Incident update',
  resolved: 'Incident resolved',
};

export function incidentMail(to: string, event: IncidentEvent, links: MailLinks): OutgoingMail {
  const { incident } = event;
  const latest = incident.updates.at(-1);
  const status = STATUS_LABEL[incident.status] ?? incident.status;
  const impact = IMPACT_LABEL[incident.impact] ?? incident.impact;
  const title = oneLine(incident.title);
  const subject = `[${status}] ${title}`;
  const statusPage = `${links.origin}/status`;
  const unsubscribe = unsubscribeUrl(links);
  const components = incident.components.length > 0 ? incident.components.join(', ') : 'none named';
  const at = new Date(latest?.at ?? incident.openedAt).toISOString();
  const text = [
    `${KIND_LABEL[event.kind]}: ${title}`,
    '',
    `Status: ${status}`,
    `Impact: ${impact}`,
    `Affected: ${components}`,
    `Opened: ${new Date(incident.openedAt).toISOString()}`,
    ...(incident.resolvedAt === null ? [] : [`Resolved: ${new Date(incident.resolvedAt).toISOString()}`]),
    '',
    ...(latest ? [`${at}: ${latest.message}`, ''] : []),
    `Current status: ${statusPage}`,
    '',
    '--',
    'You receive this because you subscribed to status updates.',
    `Unsubscribe: ${unsubscribe}`,
    '',
  ].join('\n');
  const html = htmlMail(subject, [
    `<h1 style="font-size:1.3rem">${escapeMarkup(KIND_LABEL[event.kind])}: ${escapeMarkup(title)}</h1>`,
    '<table>',
    `<tr><th scope="row" align="left">Status</th><td>${escapeMarkup(status)}</td></tr>`,
    `<tr><th scope="row" align="left">Impact</th><td>${escapeMarkup(impact)}</td></tr>`,
    `<tr><th scope="row" align="left">Affected</th><td>${escapeMarkup(components)}</td></tr>`,
    '</table>',
    latest
      ? `<p><time datetime="${at}">${at.replace('T', ' ').slice(0, 19)} UTC</time>: ${escapeMarkup(latest.message)}</p>`
      : '',
    `<p>${link(statusPage, 'Current status')}</p>`,
    `<hr><p style="font-size:.9rem">You receive this because you subscribed to status updates. ${link(unsubscribe, 'Unsubscribe')}</p>`,
  ]);
  return { to, subject, text, html, headers: listHeaders(links) };
}
