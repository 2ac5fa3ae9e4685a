/**
 * From a dying upstream to the subscribers' mailboxes, end to end: a real Gantry in front of a fake
 * upstream, sending through a real SMTP server started here (smtp-server), mails read back with
 * mailparser. A confirmed subscriber gets the automatic incident's mail when the model dies, the
 * resolved mail when it comes back, and a mail for an incident an operator opens through the admin API;
 * an address never confirmed gets none of them.
 */
import type { AddressInfo } from 'node:net';
import { type ParsedMail, simpleParser } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import { afterEach, expect, it } from 'vitest';
import { type FakeOpenAI, startFakeOpenAI } from '../helpers/fake-openai.js';
import { startGantry, type TestGantry } from '../helpers/gantry.js';
import { acmeChatModel, bringBack, QUICK_TIMEOUTS, takeOffline } from '../helpers/outage.js';
import { restCall } from '../helpers/rest.js';
import { waitFor } from '../helpers/wait.js';

const ADMIN_KEY = 'adm_incident_mail_test_key_0123456789ab';

interface Received {
  to: string[];
  mail: ParsedMail;
}

let cleanup: Array<() => Promise<void>> = [];

afterEach(async () => {
  for (const done of cleanup.reverse()) await done();
  cleanup = [];
});

async function startRelay(): Promise<{ port: number; received: Received[] }> {
  const received: Received[] = [];
  const server = new SMTPServer({
    logger: false,
    authOptional: true,
    // Its built-in certificate is self-signed: keep the dialogue in plain text.
    disabledCommands: ['STARTTLS'],
    onData(stream, session, callback) {
      simpleParser(stream)
        .then((mail) => {
          received.push({ to: session.envelope.rcptTo.map((r) => r.address), mail });
          callback();
        })
        .catch(callback);
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanup.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port: (server.server.address() as AddressInfo).port, received };
}

function linkIn(mail: ParsedMail, prefix: string): string {
  const link = (mail.text ?? '').split(/\s+/).find((w) => w.startsWith(prefix));
  if (link === undefined) throw new Error(`no ${prefix} link in: ${mail.text}`);
  return link;
}

it('a model dies: every confirmed subscriber gets the automatic incident mail, then the resolved one; a manual incident is mailed too', async () => {
  const relay = await startRelay();
  const upstream: FakeOpenAI = await startFakeOpenAI();
  cleanup.push(() => upstream.close());
  const g: TestGantry = await startGantry(
    `
providers:
  a: { kind: openai, base_url: ${upstream.url}, timeouts: ${QUICK_TIMEOUTS} }
status_page:
  incident_after_seconds: 0.5
  email: { smtp_url: 'smtp://127.0.0.1:${relay.port}', from: 'Status <status@gantry.test>' }
models:
${acmeChatModel('a', 4)}
`,
    { GANTRY_ADMIN_KEY: ADMIN_KEY },
  );
  cleanup.push(() => g.close());
  const mailsTo = (address: string) =>
    relay.received.filter((r) => r.to.includes(address)).map((r) => r.mail);
  const nthMail = (address: string, n: number) =>
    waitFor(`mail #${n} to ${address}`, () => mailsTo(address)[n - 1], 20_000);

  // Two confirmed subscribers, one that never confirms.
  for (const email of ['alice@example.com', 'bob@example.com', 'pending@example.com']) {
    const res = await restCall(g.origin, 'POST', '/status/subscribe', { key: null, body: { email } });
    expect(res.status).toBe(202);
  }
  for (const email of ['alice@example.com', 'bob@example.com']) {
    const link = linkIn(await nthMail(email, 1), `${g.origin}/status/subscribe/confirm?token=`);
    expect((await fetch(link, { method: 'POST' })).status).toBe(200);
  }
  await nthMail('pending@example.com', 1);

  // The upstream dies: two failures open the only circuit, the model is offline, an incident opens.
  const ask = await takeOffline(g, upstream);

  for (const email of ['alice@example.com', 'bob@example.com']) {
    const mail = await nthMail(email, 2);
    expect(mail.subject).toBe('[Investigating] acme/chat is offline');
    expect(mail.text).toContain('New incident: acme/chat is offline');
    expect(mail.text).toContain('Status: Investigating');
    expect(mail.text).toContain('Impact: Offline');
    expect(mail.text).toContain('Affected: acme/chat');
    expect(mail.text).toContain('deployments are unavailable');
    // Each subscriber's own unsubscribe link, in the text and the List-Unsubscribe header.
    const unsubscribe = linkIn(mail, `${g.origin}/status/unsubscribe?token=`);
    const line = mail.headerLines.find((h) => h.key === 'list-unsubscribe')?.line ?? '';
    expect(line.replace(/\r?\n\s+/g, ' ')).toBe(`List-Unsubscribe: <${unsubscribe}>`);
    expect((await fetch(unsubscribe)).status).toBe(200);
  }
  const aliceLink = linkIn(mailsTo('alice@example.com')[1] as ParsedMail, `${g.origin}/status/unsubscribe?`);
  const bobLink = linkIn(mailsTo('bob@example.com')[1] as ParsedMail, `${g.origin}/status/unsubscribe?`);
  expect(aliceLink).not.toBe(bobLink);

  // It comes back: after the cooldown a trial call closes the circuit and the incident resolves.
  await bringBack(g, upstream, ask);
  for (const email of ['alice@example.com', 'bob@example.com']) {
    const mail = await nthMail(email, 3);
    expect(mail.subject).toBe('[Resolved] acme/chat is offline');
    expect(mail.text).toContain('Incident resolved: acme/chat is offline');
    expect(mail.text).toContain('acme/chat is operational again.');
    expect(mail.text).toMatch(/Resolved: \d{4}-\d\d-\d\dT/);
  }

  // An operator opens an incident by hand: mailed too.
  const opened = await restCall<{ id: string }>(g.origin, 'POST', '/admin/v1/incidents', {
    key: null,
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
    body: { title: 'Planned maintenance', components: ['api'], impact: 'maintenance', message: 'At 14:00.' },
  });
  expect(opened.status).toBe(201);
  for (const email of ['alice@example.com', 'bob@example.com']) {
    const mail = await nthMail(email, 4);
    expect(mail.subject).toBe('[Investigating] Planned maintenance');
    expect(mail.text).toContain('Impact: Maintenance');
    expect(mail.text).toContain('At 14:00.');
  }
  // Nothing for the address never confirmed: its only mail is the confirmation.
  expect(mailsTo('pending@example.com')).toHaveLength(1);
}, 60_000);
