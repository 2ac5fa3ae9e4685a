import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliverOnce } from '../../src/webhooks/attempt.js';
import {
  checkWebhookUrl,
  createGuardedAgent,
  forbiddenAddressReason,
  type ResolvedAddress,
  type ResolveHost,
} from '../../src/webhooks/ssrf.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

const PUBLIC_V4 = '93.184.215.14';
const strict = { allowPrivate: false };

/** A resolver answering from a table, so names can point anywhere without real DNS. */
function resolverFrom(table: Record<string, string[]>): ResolveHost {
  return async (hostname) => {
    const addresses = table[hostname];
    if (addresses === undefined)
      throw Object.assign(new Error(`ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return addresses.map((address): ResolvedAddress => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
}

describe('checkWebhookUrl: URL shape', () => {
  it.each([
    ['not a url', /valid/],
    ['ftp://example.com/hook', /http or https/],
    ['file:///etc/passwd', /http or https/],
    ['javascript:alert(1)', /http or https/],
    ['https://user:pass@example.com/hook', /credentials/],
    [`https://example.com/${'a'.repeat(3000)}`, /longer/],
  ])('refuses %s', async (url, reason) => {
    const result = await checkWebhookUrl(url, strict);
    expect(result).toEqual({ ok: false, reason: expect.stringMatching(reason) });
  });

  it('accepts a public https URL, returning it parsed', async () => {
    const result = await checkWebhookUrl('https://hooks.example.com/in?token=x', {
      ...strict,
      resolve: resolverFrom({ 'hooks.example.com': [PUBLIC_V4] }),
    });
    expect(result.ok && result.url.href).toBe('https://hooks.example.com/in?token=x');
  });
});

describe('checkWebhookUrl: literal addresses', () => {
  it.each([
    ['http://127.0.0.1/', 'loopback'],
    ['http://127.9.9.9:8080/', 'loopback'],
    ['http://2130706433/', 'loopback'],
    ['http://0x7f.1/', 'loopback'],
    ['http://10.1.2.3/', 'private'],
    ['http://172.16.5.4/', 'private'],
    ['http://172.31.255.255/', 'private'],
    ['http://192.168.1.1/', 'private'],
    ['http://169.254.169.254/latest/meta-data/', 'link-local'],
    ['http://100.64.0.1/', 'CGNAT'],
    ['http://0.0.0.0/', 'unspecified'],
    ['http://224.0.0.1/', 'multicast'],
    ['http://255.255.255.255/', 'broadcast'],
    ['http://[::1]/', 'loopback'],
    ['http://[::]/', 'unspecified'],
    ['http://[fd12:3456::1]/', 'unique local'],
    ['http://[fe80::1]/', 'link-local'],
    ['http://[ff02::1]/', 'multicast'],
    ['http://[::ffff:127.0.0.1]/', 'loopback'],
    ['http://[::ffff:169.254.169.254]/', 'link-local'],
    ['http://[::ffff:10.0.0.1]/', 'private'],
    ['http://[64:ff9b::7f00:1]/', 'NAT64'],
    ['http://[2002:a9fe:a9fe::1]/', 'link-local'],
  ])('refuses %s (%s)', async (url, reason) => {
    const result = await checkWebhookUrl(url, strict);
    expect(result).toEqual({ ok: false, reason: expect.stringContaining(reason) });
  });

  it.each([
    'http://8.8.8.8/',
    'https://1.1.1.1:8443/x',
    'http://172.32.0.1/',
    'http://[2606:4700:4700::1111]/',
    'http://[::ffff:8.8.8.8]/',
    'http://[64:ff9b::808:808]/',
  ])('accepts public %s', async (url) => {
    expect((await checkWebhookUrl(url, strict)).ok).toBe(true);
  });

  it('lets everything through with allowPrivate', async () => {
    for (const url of [
      'http://127.0.0.1:9/',
      'http://[::1]/',
      'http://169.254.169.254/',
      'http://localhost/',
    ]) {
      expect((await checkWebhookUrl(url, { allowPrivate: true })).ok).toBe(true);
    }
  });
});

describe('checkWebhookUrl: names', () => {
  it.each([
    'http://localhost:3000/',
    'http://LOCALHOST./',
    'http://app.localhost/',
    'http://metadata.google.internal/computeMetadata/v1/',
    'http://metadata/',
    'http://db.internal/',
    'http://printer.local/',
  ])('refuses %s by name', async (url) => {
    const resolve = resolverFrom({});
    expect(await checkWebhookUrl(url, { ...strict, resolve })).toEqual({
      ok: false,
      reason: expect.stringMatching(/name/),
    });
  });

  it('refuses a name that resolves to a forbidden address', async () => {
    const resolve = resolverFrom({ 'evil.example': ['127.0.0.1'], 'meta.example': ['169.254.169.254'] });
    expect(await checkWebhookUrl('https://evil.example/hook', { ...strict, resolve })).toEqual({
      ok: false,
      reason: 'host evil.example resolves to loopback address 127.0.0.1',
    });
    expect((await checkWebhookUrl('https://meta.example/', { ...strict, resolve })).ok).toBe(false);
  });

  it('refuses a name when any one of its addresses is forbidden', async () => {
    const resolve = resolverFrom({ 'mixed.example': [PUBLIC_V4, '::1'] });
    expect((await checkWebhookUrl('https://mixed.example/', { ...strict, resolve })).ok).toBe(false);
  });

  it('refuses a name that does not resolve, or not in time', async () => {
    expect(
      await checkWebhookUrl('https://nowhere.example/', { ...strict, resolve: resolverFrom({}) }),
    ).toEqual({
      ok: false,
      reason: 'host nowhere.example does not resolve',
    });
    const hanging: ResolveHost = () => new Promise(() => undefined);
    const result = await checkWebhookUrl('https://slow.example/', {
      ...strict,
      resolve: hanging,
      resolveTimeoutMs: 50,
    });
    expect(result.ok).toBe(false);
  });

  it('exempts allowHosts, by name or literal address', async () => {
    const resolve = resolverFrom({ 'receiver.internal': ['10.0.0.5'] });
    const options = { ...strict, resolve, allowHosts: ['Receiver.Internal', '127.0.0.1', '[::1]'] };
    expect((await checkWebhookUrl('http://receiver.internal/', options)).ok).toBe(true);
    expect((await checkWebhookUrl('http://127.0.0.1:8080/', options)).ok).toBe(true);
    expect((await checkWebhookUrl('http://[::1]:8080/', options)).ok).toBe(true);
    expect((await checkWebhookUrl('http://127.0.0.2/', options)).ok).toBe(false);
  });

  it('never names the path or query (which may hold a token) in the reason', async () => {
    const result = await checkWebhookUrl('http://127.0.0.1/hook?token=s3cret', strict);
    expect(!result.ok && result.reason).not.toContain('s3cret');
  });
});

describe('forbiddenAddressReason', () => {
  it('ignores IPv6 zone ids and rejects non-addresses', () => {
    expect(forbiddenAddressReason('fe80::1%eth0')).toBe('link-local');
    expect(forbiddenAddressReason('example.com')).toBe('not an IP address');
    expect(forbiddenAddressReason('2606:4700:4700::1111')).toBeNull();
  });
});

describe('createGuardedAgent: the address connected to is the address checked', () => {
  let receiver: WebhookReceiver;
  beforeAll(async () => {
    receiver = await startWebhookReceiver();
  });
  afterAll(async () => {
    await receiver.close();
  });

  async function post(url: string, agent: ReturnType<typeof createGuardedAgent>) {
    try {
      return await deliverOnce({ url, body: '{}', headers: {}, timeoutMs: 2000, dispatcher: agent });
    } finally {
      await agent.close();
    }
  }

  it('refuses a literal loopback address before connecting', async () => {
    receiver.reset();
    const result = await post(`http://127.0.0.1:${receiver.port}/hook`, createGuardedAgent(strict));
    expect(result).toMatchObject({ outcome: 'rejected', error: expect.stringContaining('loopback') });
    expect(receiver.requests).toHaveLength(0);
  });

  it('refuses an IPv6 loopback literal', async () => {
    const result = await post(`http://[::1]:${receiver.port}/hook`, createGuardedAgent(strict));
    expect(result).toMatchObject({ outcome: 'rejected', error: expect.stringContaining('loopback') });
  });

  it('refuses localhost through the real resolver', async () => {
    receiver.reset();
    const result = await post(`http://localhost:${receiver.port}/hook`, createGuardedAgent(strict));
    expect(result.outcome).toBe('rejected');
    expect(receiver.requests).toHaveLength(0);
  });

  it('refuses a name that resolves to 127.0.0.1 at connect time (DNS rebinding)', async () => {
    receiver.reset();
    // Public when the URL was checked, loopback when the delivery connects.
    let calls = 0;
    const rebinding: ResolveHost = async () => [
      { address: calls++ === 0 ? PUBLIC_V4 : '127.0.0.1', family: 4 },
    ];
    const url = `http://rebind.example:${receiver.port}/hook`;
    expect((await checkWebhookUrl(url, { ...strict, resolve: rebinding })).ok).toBe(true);
    const result = await post(url, createGuardedAgent({ ...strict, resolve: rebinding }));
    expect(result).toMatchObject({
      outcome: 'rejected',
      error: 'webhook target rebind.example resolves to loopback address 127.0.0.1',
    });
    expect(receiver.requests).toHaveLength(0);
  });

  it('connects to the resolved address when private targets are allowed', async () => {
    receiver.reset();
    const resolve = resolverFrom({ 'receiver.example': ['127.0.0.1'] });
    const result = await post(
      `http://receiver.example:${receiver.port}/hook`,
      createGuardedAgent({ allowPrivate: true, resolve }),
    );
    expect(result).toMatchObject({ outcome: 'delivered', status: 200 });
    expect(receiver.requests[0]?.headers.host).toBe(`receiver.example:${receiver.port}`);
  });

  it('lets allowHosts through, literal or named', async () => {
    receiver.reset();
    const resolve = resolverFrom({ 'hooks.test': ['127.0.0.1'] });
    const agentOptions = { ...strict, resolve, allowHosts: ['127.0.0.1', 'hooks.test'] };
    expect(await post(receiver.url, createGuardedAgent(agentOptions))).toMatchObject({
      outcome: 'delivered',
    });
    expect(
      await post(`http://hooks.test:${receiver.port}/hook`, createGuardedAgent(agentOptions)),
    ).toMatchObject({ outcome: 'delivered' });
    expect(receiver.requests).toHaveLength(2);
  });
});
