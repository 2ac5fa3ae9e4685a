/**
 * E-mail subscriptions to the status page end to end: a real Gantry (in process, real HTTP) sending
 * through a real SMTP server started here (smtp-server, with AUTH), mails read back with mailparser.
 * Subscribe (form and JSON) → confirmation mail → the GET page (changes nothing) → POST confirm → an
 * incident mail → unsubscribe by one-click POST and by the page → no more mail; expired and invalid
 * tokens; the same answer for known and unknown addresses; no secret in pages or logs. Embedded mode
 * (SQLite) and distributed mode (Redis).
 */
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { type ParsedMail, simpleParser } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import { afterEach, describe, expect, it } from 'vitest';
import type { IncidentEvent } from '../../src/status/incidents.js';
import { hashToken } from '../../src/status/subscribers.js';
import { DEFAULT_SUBSCRIBERS_PREFIX } from '../../src/status/subscribers-redis.js';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { describeRedis, startRedis, type TestRedis } from '../helpers/redis.js';
import { until, waitFor } from '../helpers/wait.js';

const USER = 'relay-user';
const PASSWORD = 'smtp-Pa55/word+never%logged';

interface Received {
  to: string[];
  mail: ParsedMail;
}

interface FakeRelay {
  port: number;
  received: Received[];
  /** RCPT TO answers 451 (try again later) this many more times. */
  failNext: number;
  auths: number;
  close(): Promise<void>;
}

async function startRelay(): Promise<FakeRelay> {
  const relay: FakeRelay = { port: 0, received: [], failNext: 0, auths: 0, close: async () => {} };
  const server = new SMTPServer({
    logger: false,
    allowInsecureAuth: true,
    // Its built-in certificate is self-signed: keep the test's dialogue in plain text.
    disabledCommands: ['STARTTLS'],
    onAuth(auth, _session, callback) {
      relay.auths += 1;
      if (auth.username === USER && auth.password === PASSWORD) return callback(null, { user: USER });
      return callback(new Error('Invalid username or password'));
    },
    onRcptTo(_address, _session, callback) {
      if (relay.failNext > 0) {
        relay.failNext -= 1;
        return callback(Object.assign(new Error('Greylisted, try again later'), { responseCode: 451 }));
      }
      return callback();
    },
    onData(stream, session, callback) {
      simpleParser(stream)
        .then((mail) => {
          relay.received.push({ to: session.envelope.rcptTo.map((r) => r.address), mail });
          callback();
        })
        .catch(callback);
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  relay.port = (server.server.address() as AddressInfo).port;
  relay.close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return relay;
}

const CONFIG = `${LOCAL_CONFIG}
status_page:
  email:
    smtp_url_env: STATUS_SMTP_URL
    from: 'Status <status@gantry.test>'
`;

let gantry: TestGantry | undefined;
let relay: FakeRelay | undefined;
let redis: TestRedis | undefined;

afterEach(async () => {
  await gantry?.close();
  gantry = undefined;
  await relay?.close();
  relay = undefined;
  await redis?.close();
  redis = undefined;
});

interface Started {
  g: TestGantry;
  relay: FakeRelay;
  logs: string[];
}

async function start(env: NodeJS.ProcessEnv = {}): Promise<Started> {
  relay = await startRelay();
  const logs: string[] = [];
  gantry = await startGantry(
    CONFIG,
    {
      ...env,
      STATUS_SMTP_URL: `smtp://${USER}:${encodeURIComponent(PASSWORD)}@127.0.0.1:${relay.port}`,
    },
    { onLog: (line) => logs.push(line) },
  );
  return { g: gantry, relay, logs };
}

function mailsTo(relay: FakeRelay, address: string): ParsedMail[] {
  return relay.received.filter((r) => r.to.includes(address)).map((r) => r.mail);
}

function waitForMail(relay: FakeRelay, address: string, count: number): Promise<ParsedMail> {
  return waitFor(`mail #${count} to ${address}`, () => mailsTo(relay, address)[count - 1], 15_000);
}

/** A header as sent (mailparser folds List-* headers into a structure of its own). */
function header(mail: ParsedMail, name: string): string | undefined {
  const line = mail.headerLines.find((h) => h.key === name)?.line;
  return line
    ?.slice(line.indexOf(':') + 1)
    .replace(/\r?\n\s+/g, ' ')
    .trim();
}

/** The first link in the text part that starts with `prefix`. */
function linkIn(mail: ParsedMail, prefix: string): string {
  const found = (mail.text ?? '').split(/\s+/).find((word) => word.startsWith(prefix));
  if (!found) throw new Error(`no ${prefix} link in:\n${mail.text}`);
  return found;
}

function tokenOf(link: string): string {
  return new URL(link).searchParams.get('token') ?? '';
}

async function subscribeForm(
  g: TestGantry,
  email: string,
): Promise<{ status: number; body: string; type: string }> {
  const res = await fetch(`${g.origin}/status/subscribe`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ email }).toString(),
  });
  return { status: res.status, body: await res.text(), type: res.headers.get('content-type') ?? '' };
}

async function subscribeJson(g: TestGantry, email: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`${g.origin}/status/subscribe`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email }),
  });
  return { status: res.status, body: await res.text() };
}

async function postForm(
  url: string,
  fields: Record<string, string>,
): Promise<{ status: number; body: string }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(fields).toString(),
  });
  return { status: res.status, body: await res.text() };
}

/** The hidden token and action of the one form on a page. */
function formOf(origin: string, html: string): { action: string; token: string } {
  const action = /<form method="post" action="([^"]+)"/.exec(html)?.[1];
  const token = /<input type="hidden" name="token" value="([^"]+)"/.exec(html)?.[1];
  if (!action || !token) throw new Error(`no button form in:\n${html}`);
  return { action: new URL(action.replace(/&amp;/g, '&'), origin).href, token };
}

const HOSTILE_TITLE = 'API <script>alert(1)</script> slow & failing';

function event(kind: IncidentEvent['kind'], message: string): IncidentEvent {
  const openedAt = Date.parse('2026-01-10T12:00:00Z');
  const resolved = kind === 'resolved';
  return {
    kind,
    incident: {
      id: 'inc_1',
      title: HOSTILE_TITLE,
      components: ['api', 'gantry/local-chat'],
      impact: 'degraded',
      status: resolved ? 'resolved' : kind === 'opened' ? 'investigating' : 'identified',
      source: 'manual',
      openedAt,
      resolvedAt: resolved ? openedAt + 3_600_000 : null,
      updates: [{ at: openedAt + (resolved ? 3_600_000 : 0), status: 'investigating', message }],
    },
  };
}

/** Makes every pending confirmation of the store look past its expiry (as 48 hours later would). */
async function expirePending(g: TestGantry, redisUrl: string | undefined): Promise<void> {
  if (!redisUrl) {
    g.store.handle.prepare('UPDATE status_subscribers SET pending_until = 1 WHERE confirmed = 0').run();
    return;
  }
  const r = new Redis(redisUrl);
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${DEFAULT_SUBSCRIBERS_PREFIX}sub:*`, 'COUNT', 100);
      cursor = next;
      for (const key of keys)
        if ((await r.hget(key, 'confirmed')) === '0') await r.hset(key, 'pending_until', '1');
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
}

async function scenario(env: NodeJS.ProcessEnv = {}): Promise<void> {
  const { g, relay, logs } = await start(env);
  const subscriptions = g.gantry.plane.subscriptions;
  const origin = g.origin;

  // The page offers the form.
  const page = await (await fetch(`${origin}/status`)).text();
  expect(page).toContain('<form method="post" action="/status/subscribe">');
  expect(page).toMatch(/<label for="subscribe-email">/);

  // Subscribe: a form (mixed case, trimmed: one address), then JSON. The first mail meets a greylisting
  // relay (451) and arrives on a retry.
  relay.failNext = 1;
  const first = await subscribeForm(g, '  Alice@Example.COM ');
  expect(first.status).toBe(200);
  expect(first.type).toContain('text/html');
  expect(first.body).toContain('Check your inbox');
  const bob = await subscribeJson(g, 'bob@example.com');
  expect(bob.status).toBe(202);
  expect(JSON.parse(bob.body)).toEqual({ status: 'pending', message: expect.any(String) });
  await subscribeJson(g, 'dave@example.com');

  const confirmAlice = await waitForMail(relay, 'alice@example.com', 1);
  expect(relay.auths).toBeGreaterThan(0);
  expect(confirmAlice.subject).toBe('Confirm your subscription to status updates');
  expect(confirmAlice.from?.text).toContain('status@gantry.test');
  const aliceConfirmLink = linkIn(confirmAlice, `${origin}/status/subscribe/confirm?token=`);
  expect(confirmAlice.html).toContain('Confirm my subscription');
  // Every mail carries the unsubscribe link, in the body and in the RFC 8058 headers.
  const pendingUnsubscribe = linkIn(confirmAlice, `${origin}/status/unsubscribe?token=`);
  expect(header(confirmAlice, 'list-unsubscribe')).toContain(pendingUnsubscribe);
  expect(header(confirmAlice, 'list-unsubscribe-post')).toBe('List-Unsubscribe=One-Click');
  const daveConfirm = linkIn(
    await waitForMail(relay, 'dave@example.com', 1),
    `${origin}/status/subscribe/confirm?token=`,
  );
  const bobConfirmMail = await waitForMail(relay, 'bob@example.com', 1);
  const bobConfirm = linkIn(bobConfirmMail, `${origin}/status/subscribe/confirm?token=`);

  // GET (what a mail scanner does) shows a button and confirms nothing.
  const ask = await fetch(aliceConfirmLink);
  expect(ask.status).toBe(200);
  expect(ask.headers.get('cache-control')).toBe('no-store');
  expect(ask.headers.get('referrer-policy')).toBe('no-referrer');
  const askHtml = await ask.text();
  expect(askHtml).not.toContain('<script');
  const form = formOf(origin, askHtml);
  expect(form.action).toBe(`${origin}/status/subscribe/confirm`);
  expect(form.token).toBe(tokenOf(aliceConfirmLink));

  // Only dave confirms for now: an event reaches dave, not alice (pending) nor bob (never confirms).
  expect((await postForm(daveConfirm, {})).status).toBe(200);
  subscriptions.notify(event('opened', 'Elevated error rates on the API.'));
  await waitForMail(relay, 'dave@example.com', 2);
  await subscriptions.idle();
  expect(mailsTo(relay, 'alice@example.com')).toHaveLength(1);

  // The button's POST confirms; the token then stops working.
  const confirmed = await postForm(form.action, { token: form.token });
  expect(confirmed.status).toBe(200);
  expect(confirmed.body).toContain('Subscription confirmed');
  expect((await postForm(form.action, { token: form.token })).status).toBe(404);
  expect((await fetch(aliceConfirmLink)).status).toBe(404);

  // The same answer for a confirmed, a pending and an unknown address (and nothing mailed to the
  // confirmed one).
  const known = await subscribeForm(g, 'alice@example.com');
  const pending = await subscribeForm(g, 'bob@example.com');
  const unknown = await subscribeForm(g, 'carol@example.com');
  expect(known).toEqual(unknown);
  expect(pending).toEqual(unknown);
  const knownJson = await subscribeJson(g, 'alice@example.com');
  expect(knownJson).toEqual(await subscribeJson(g, 'erin@example.com'));
  await waitForMail(relay, 'carol@example.com', 1);
  // bob's second confirmation mail: a new token, the first one no longer works.
  const bobSecond = linkIn(
    await waitForMail(relay, 'bob@example.com', 2),
    `${origin}/status/subscribe/confirm?token=`,
  );
  expect(bobSecond).not.toBe(bobConfirm);
  expect((await postForm(bobConfirm, {})).status).toBe(404);
  await subscriptions.idle();
  expect(mailsTo(relay, 'alice@example.com')).toHaveLength(1);

  // An incident event: alice and dave get it.
  subscriptions.notify(event('updated', 'We found the cause: a <b>bad</b> deploy.'));
  const incident = await waitForMail(relay, 'alice@example.com', 2);
  expect(incident.subject).toBe(`[Identified] ${HOSTILE_TITLE}`);
  expect(incident.text).toContain('We found the cause: a <b>bad</b> deploy.');
  expect(incident.text).toContain('Affected: api, gantry/local-chat');
  expect(incident.text).toContain(`${origin}/status`);
  expect(incident.html).not.toContain('<script>');
  expect(incident.html).toContain('&lt;script&gt;');
  expect(incident.html).toContain('a &lt;b&gt;bad&lt;/b&gt; deploy');
  const oneClick = linkIn(incident, `${origin}/status/unsubscribe?token=`);
  expect(header(incident, 'list-unsubscribe')).toBe(`<${oneClick}>`);
  expect(header(incident, 'list-unsubscribe-post')).toBe('List-Unsubscribe=One-Click');
  await waitForMail(relay, 'dave@example.com', 3);

  // A tampered unsubscribe token does nothing.
  const tampered = `${oneClick.slice(0, -3)}${oneClick.endsWith('AAA') ? 'BBB' : 'AAA'}`;
  expect((await fetch(tampered)).status).toBe(404);
  expect((await fetch(tampered, { method: 'POST' })).status).toBe(404);

  // GET on the unsubscribe link: a page with a button; still subscribed.
  const unsubscribePage = await fetch(oneClick);
  expect(unsubscribePage.status).toBe(200);
  const unsubscribeForm = formOf(origin, await unsubscribePage.text());

  // One-click (RFC 8058): a POST to the List-Unsubscribe URL with List-Unsubscribe=One-Click.
  const clicked = await fetch(oneClick, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: 'List-Unsubscribe=One-Click',
  });
  expect(clicked.status).toBe(200);
  // Again (a client retrying): still fine, nothing left to do.
  const again = await postForm(unsubscribeForm.action, { token: unsubscribeForm.token });
  expect(again.status).toBe(200);
  expect(again.body).toContain('Not subscribed');

  subscriptions.notify(event('resolved', 'Fixed.'));
  const resolvedForDave = await waitForMail(relay, 'dave@example.com', 4);
  expect(resolvedForDave.subject).toBe(`[Resolved] ${HOSTILE_TITLE}`);
  await subscriptions.idle();
  expect(mailsTo(relay, 'alice@example.com')).toHaveLength(2);

  // dave unsubscribes through the page's button (the multipart body of RFC 8058's example works too).
  const daveLink = linkIn(resolvedForDave, `${origin}/status/unsubscribe?token=`);
  const davePage = formOf(origin, await (await fetch(daveLink)).text());
  const multipart = new FormData();
  multipart.set('List-Unsubscribe', 'One-Click');
  const bye = await fetch(`${davePage.action}?token=${encodeURIComponent(davePage.token)}`, {
    method: 'POST',
    body: multipart,
  });
  expect(bye.status).toBe(200);
  expect(await bye.text()).toContain('Unsubscribed');
  expect(await (await fetch(daveLink)).text()).toContain('Not subscribed');

  // Nobody confirmed is left: the next event is mailed to no one.
  const before = relay.received.length;
  subscriptions.notify(event('updated', 'Still fine.'));
  await until('the event fanned out to no one', () =>
    logs.some((l) => l.includes('"recipients":0') && l.includes('status mails queued')),
  );
  await subscriptions.idle();
  expect(relay.received.length).toBe(before);

  // Expired and invalid confirmation tokens.
  await expirePending(g, env.REDIS_URL);
  expect((await fetch(bobSecond)).status).toBe(404);
  expect((await postForm(bobSecond, {})).status).toBe(404);
  expect((await fetch(`${origin}/status/subscribe/confirm?token=not-a-token`)).status).toBe(404);
  expect((await fetch(`${origin}/status/subscribe/confirm`)).status).toBe(404);
  expect((await postForm(`${origin}/status/subscribe/confirm`, { token: 'x'.repeat(43) })).status).toBe(404);

  // Not an address.
  const bad = await subscribeJson(g, 'alice@example.com\r\nBcc: everyone@example.com');
  expect(bad.status).toBe(400);
  expect((await subscribeForm(g, 'nope')).status).toBe(400);

  // No secret in any page or log line: SMTP credentials, tokens or their hashes, full addresses.
  const tokens = relay.received.flatMap((r) =>
    (r.mail.text ?? '')
      .split(/\s+/)
      .filter((w) => w.includes('?token='))
      .map(tokenOf),
  );
  expect(tokens.length).toBeGreaterThan(5);
  const allLogs = logs.join('\n');
  expect(allLogs).toContain('status mail not sent: retrying');
  expect(allLogs).toContain('a***@example.com');
  for (const secret of [
    PASSWORD,
    encodeURIComponent(PASSWORD),
    USER,
    'alice@example.com',
    'bob@example.com',
  ]) {
    expect(allLogs).not.toContain(secret);
    expect(page).not.toContain(secret);
  }
  for (const token of tokens) {
    expect(allLogs).not.toContain(token);
    expect(allLogs).not.toContain(hashToken(token));
  }
  for (const r of relay.received) {
    expect(r.mail.text).not.toContain(PASSWORD);
    expect(r.mail.html || '').not.toContain(PASSWORD);
  }
}

describe('status page e-mail subscriptions, embedded mode (SQLite)', () => {
  it('confirms, mails an incident, unsubscribes; no secret in pages, mails or logs', async () => {
    await scenario();
  }, 60_000);

  it('a relay refusing the credentials: the failure is logged without them', async () => {
    relay = await startRelay();
    const logs: string[] = [];
    const wrong = `${PASSWORD}-wrong`;
    gantry = await startGantry(
      CONFIG,
      { STATUS_SMTP_URL: `smtp://${USER}:${encodeURIComponent(wrong)}@127.0.0.1:${relay.port}` },
      { onLog: (line) => logs.push(line) },
    );
    expect((await subscribeJson(gantry, 'alice@example.com')).status).toBe(202);
    const line = await waitFor('the refusal in the log', () =>
      logs.find((l) => l.includes('status mail refused by the relay')),
    );
    expect(line).toContain('"code":"EAUTH"');
    expect(line).toContain('a***@example.com');
    expect(relay.received).toHaveLength(0);
    const all = logs.join('\n');
    for (const secret of [wrong, encodeURIComponent(wrong), PASSWORD, USER, 'alice@example.com']) {
      expect(all).not.toContain(secret);
    }
  });

  it('without status_page.email: no form and no subscription routes', async () => {
    gantry = await startGantry(LOCAL_CONFIG);
    const page = await (await fetch(`${gantry.origin}/status`)).text();
    expect(page).not.toContain('/status/subscribe');
    const res = await fetch(`${gantry.origin}/status/subscribe`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'alice@example.com' }),
    });
    expect(res.status).toBe(404);
  });
});

describeRedis('status page e-mail subscriptions, distributed mode (Redis)', () => {
  it('confirms, mails an incident, unsubscribes; no secret in pages, mails or logs', async () => {
    redis = await startRedis();
    await scenario({ REDIS_URL: redis.url });
  }, 60_000);
});
