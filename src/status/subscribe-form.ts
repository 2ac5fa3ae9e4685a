/**
 * HTML of the e-mail subscription (README, "Status page" → "E-mail subscriptions"): the form on /status
 * and the small pages of the flow. Plain HTML, every value escaped, no scripts; each action is a form
 * with a real button, so a keyboard (or a screen reader) does everything a mouse does.
 */
import { escapeMarkup } from './render.js';

export const SUBSCRIBE_PATH = '/status/subscribe';

/** The form on /status, or nothing when e-mail is not configured. */
export function subscribeForm(enabled: boolean | undefined): string {
  if (!enabled) return '';
  return [
    '<section aria-labelledby="h-subscribe"><h2 id="h-subscribe">Updates by e-mail</h2>',
    `<form method="post" action="${SUBSCRIBE_PATH}">`,
    '<p><label for="subscribe-email">E-mail address</label> ',
    '<input id="subscribe-email" name="email" type="email" required maxlength="254" autocomplete="email"> ',
    '<button type="submit">Subscribe</button></p></form>',
    '<p>You get a mail with a link to confirm first. Every mail has a link to unsubscribe.</p></section>',
  ].join('');
}

const CSS = `
body{font:16px/1.5 system-ui,sans-serif;margin:0;color:#1a1a1a;background:#fff}
main{max-width:40rem;margin:0 auto;padding:1rem}h1{font-size:1.5rem}
button{font:inherit;padding:.25rem .75rem}
a:focus-visible,button:focus-visible{outline:3px solid #1d4ed8;outline-offset:2px}
`;

/** A whole page: a heading, paragraphs (already HTML) and a way back to /status. */
export function page(title: string, paragraphs: string[]): string {
  return [
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width,initial-scale=1">',
    '<meta name="robots" content="noindex">',
    `<title>${escapeMarkup(title)}</title><style>${CSS}</style></head><body><main>`,
    `<h1>${escapeMarkup(title)}</h1>`,
    ...paragraphs.map((p) => (p.startsWith('<') ? p : `<p>${p}</p>`)),
    '<p><a href="/status">Back to the status page</a></p>',
    '</main></body></html>\n',
  ].join('');
}

/** A form that POSTs the token back (to `action`) with one button. */
export function buttonForm(action: string, token: string, label: string): string {
  return [
    `<form method="post" action="${escapeMarkup(action)}">`,
    `<input type="hidden" name="token" value="${escapeMarkup(token)}">`,
    `<button type="submit">${escapeMarkup(label)}</button></form>`,
  ].join('');
}

export const PAGES = {
  checkInbox: () =>
    page('Check your inbox', [
      'If the address can receive our mails, a message with a confirmation link is on its way.',
      'Nothing is sent until the link is used; it works for 48 hours.',
    ]),
  invalidAddress: () =>
    page('Not an e-mail address', ['Go back and enter one address, like name@example.com.']),
  tooMany: () => page('Too many requests', ['Too many subscriptions from this network; try again later.']),
  confirmAsk: (action: string, token: string) =>
    page('Confirm your subscription', [
      'Press the button to start receiving status updates at this address.',
      buttonForm(action, token, 'Confirm subscription'),
    ]),
  confirmed: () =>
    page('Subscription confirmed', [
      'You will get a mail when an incident is opened, updated or resolved. Each has a link to unsubscribe.',
    ]),
  confirmInvalid: () =>
    page('Link not valid', [
      'This confirmation link is not valid, was already used, or has expired. Subscribe again from the status page.',
    ]),
  unsubscribeAsk: (action: string, token: string) =>
    page('Unsubscribe', [
      'Press the button to stop receiving status updates at this address.',
      buttonForm(action, token, 'Unsubscribe'),
    ]),
  unsubscribed: () => page('Unsubscribed', ['This address will receive no more status updates.']),
  notSubscribed: () => page('Not subscribed', ['This address is not subscribed (anymore): nothing to do.']),
  unsubscribeInvalid: () => page('Link not valid', ['This unsubscribe link is not valid.']),
};
