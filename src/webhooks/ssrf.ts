/**
 * SSRF guard for webhook targets. A webhook URL is chosen by the caller and fetched from inside our
 * network, so by default it may not reach loopback, private, link-local (cloud metadata), CGNAT,
 * multicast or otherwise reserved addresses, nor names that only mean something internally.
 *
 * Two layers, because a check at request time alone is not enough:
 * - `checkWebhookUrl` refuses a bad URL when the prediction is created, with a reason for the caller;
 * - `createGuardedAgent` checks again the addresses each connection actually uses, so a name that
 *   resolved to a public address at creation and to 127.0.0.1 at delivery (DNS rebinding) is refused.
 * `allowPrivate` (operator configuration, e.g. for tests or an all-internal deployment) turns both off;
 * `allowHosts` exempts named hosts only.
 *
 * Prediction output URLs, chosen by the backend, get the same guard (src/predictions/downloads.ts).
 */
import { lookup as systemLookup } from 'node:dns/promises';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { Agent, buildConnector } from 'undici';

export interface ResolvedAddress {
  address: string;
  /** 4 or 6 */
  family: number;
}

/** Resolves a name to every address it has. Injectable so tests can map names without real DNS. */
export type ResolveHost = (hostname: string) => Promise<ResolvedAddress[]>;

export interface WebhookTargetPolicy {
  /** Lets loopback/private/reserved targets through: for tests and deployments whose receivers are internal. */
  allowPrivate: boolean;
  /** Host names (or literal IPs) exempt from the checks, compared case-insensitively. */
  allowHosts?: readonly string[];
  /** Defaults to the system resolver (getaddrinfo, as connections use). */
  resolve?: ResolveHost;
}

export interface CheckWebhookUrlOptions extends WebhookTargetPolicy {
  /** How long name resolution may take before the URL is refused (default 5000). */
  resolveTimeoutMs?: number;
}

export type WebhookUrlCheck = { ok: true; url: URL } | { ok: false; reason: string };

/** Thrown through the connector when a connection would reach a forbidden target; never retried. */
export class ForbiddenWebhookTargetError extends Error {
  readonly code = 'ERR_WEBHOOK_TARGET_FORBIDDEN';
  constructor(message: string) {
    super(message);
    this.name = 'ForbiddenWebhookTargetError';
  }
}

export function isForbiddenWebhookTargetError(err: unknown): err is ForbiddenWebhookTargetError {
  return err instanceof ForbiddenWebhookTargetError;
}

const MAX_URL_LENGTH = 2048;
const DEFAULT_RESOLVE_TIMEOUT_MS = 5000;
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/** [network, prefix length, why it is refused]; the first match names the reason. */
const FORBIDDEN_V4: readonly [string, number, string][] = [
  ['0.0.0.0', 8, 'unspecified ("this network")'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'shared address space (CGNAT)'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local (cloud metadata)'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'IETF protocol assignments'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.88.99.0', 24, '6to4 relay anycast'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved or broadcast'],
];

// IPv4-mapped addresses (::ffff:a.b.c.d) need no entry: BlockList matches them against the IPv4 rules.
// NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address that is checked separately.
const FORBIDDEN_V6: readonly [string, number, string][] = [
  ['::1', 128, 'loopback'],
  ['::', 128, 'unspecified'],
  ['::', 96, 'IPv4-compatible (deprecated)'],
  ['64:ff9b:1::', 48, 'local-use NAT64'],
  ['100::', 64, 'discard-only'],
  ['2001::', 32, 'Teredo tunnel'],
  ['2001:db8::', 32, 'documentation'],
  ['fc00::', 7, 'private (unique local)'],
  ['fe80::', 10, 'link-local'],
  ['fec0::', 10, 'site-local (deprecated)'],
  ['ff00::', 8, 'multicast'],
];

const FORBIDDEN_RANGES: readonly { reason: string; list: BlockList }[] = [
  ...FORBIDDEN_V4.map(([network, prefix, reason]) => range(network, prefix, 'ipv4', reason)),
  ...FORBIDDEN_V6.map(([network, prefix, reason]) => range(network, prefix, 'ipv6', reason)),
];

function range(network: string, prefix: number, type: 'ipv4' | 'ipv6', reason: string) {
  const list = new BlockList();
  list.addSubnet(network, prefix, type);
  return { reason, list };
}

/** Names that only mean something inside a network, whatever they resolve to from here. */
const FORBIDDEN_NAMES = new Map([
  ['localhost', 'loopback name'],
  ['metadata', 'cloud metadata name'],
  ['metadata.google.internal', 'cloud metadata name'],
  ['metadata.goog', 'cloud metadata name'],
]);
const FORBIDDEN_SUFFIXES: readonly [string, string][] = [
  ['.localhost', 'loopback name'],
  ['.internal', 'internal-only name'],
  ['.local', 'link-local (mDNS) name'],
  ['.home.arpa', 'home network name'],
];

/** Why `address` (a literal IPv4/IPv6 address) may not be a webhook target, or null if it may. */
export function forbiddenAddressReason(address: string): string | null {
  const bare = stripZone(address);
  const family = isIP(bare);
  if (family === 0) return 'not an IP address';
  const type = family === 4 ? 'ipv4' : 'ipv6';
  for (const { reason, list } of FORBIDDEN_RANGES) {
    if (list.check(bare, type)) return reason;
  }
  if (family === 6) {
    const embedded = embeddedIpv4(bare);
    const inner = embedded === null ? null : forbiddenAddressReason(embedded);
    if (inner !== null) return `${inner}, embedded in a NAT64/6to4 address`;
  }
  return null;
}

/** Why the host name may not be a webhook target, or null if its addresses decide. */
export function forbiddenHostnameReason(hostname: string): string | null {
  const name = normaliseHost(hostname);
  const exact = FORBIDDEN_NAMES.get(name);
  if (exact !== undefined) return exact;
  for (const [suffix, reason] of FORBIDDEN_SUFFIXES) {
    if (name.endsWith(suffix)) return reason;
  }
  return null;
}

/**
 * Validates a webhook URL at creation time: scheme, no credentials, and (unless `allowPrivate`) a host
 * whose name and every resolved address are public. Never throws; the reason is safe to show the caller
 * (it names the host, never the path or query, which may carry a token).
 */
export async function checkWebhookUrl(
  url: string,
  options: CheckWebhookUrlOptions,
): Promise<WebhookUrlCheck> {
  if (url.length > MAX_URL_LENGTH)
    return { ok: false, reason: `URL is longer than ${MAX_URL_LENGTH} characters` };
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { ok: false, reason: 'not a valid absolute URL' };
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    return { ok: false, reason: 'URL scheme must be http or https' };
  }
  if (parsed.username !== '' || parsed.password !== '') {
    return { ok: false, reason: 'URL must not contain credentials (use webhook.auth_header/auth_token)' };
  }
  const host = normaliseHost(parsed.hostname);
  if (host === '') return { ok: false, reason: 'URL has no host' };
  if (options.allowPrivate || isExemptHost(host, options.allowHosts)) return { ok: true, url: parsed };

  if (isIP(host) !== 0) {
    const reason = forbiddenAddressReason(host);
    return reason === null
      ? { ok: true, url: parsed }
      : { ok: false, reason: `address ${host} is ${reason}` };
  }
  const nameReason = forbiddenHostnameReason(host);
  if (nameReason !== null) return { ok: false, reason: `host ${host} is a ${nameReason}` };

  let addresses: ResolvedAddress[];
  try {
    addresses = await withTimeout(
      (options.resolve ?? resolveSystem)(host),
      options.resolveTimeoutMs ?? DEFAULT_RESOLVE_TIMEOUT_MS,
    );
  } catch {
    return { ok: false, reason: `host ${host} does not resolve` };
  }
  if (addresses.length === 0) return { ok: false, reason: `host ${host} does not resolve` };
  // Any forbidden address refuses the URL: the connection may use any of them.
  for (const { address } of addresses) {
    const reason = forbiddenAddressReason(address);
    if (reason !== null)
      return { ok: false, reason: `host ${host} resolves to ${reason} address ${address}` };
  }
  return { ok: true, url: parsed };
}

export interface GuardedAgentOptions extends WebhookTargetPolicy {
  /** Time allowed for resolving and connecting (default 10000). */
  connectTimeoutMs?: number;
}

/**
 * An undici Agent for webhook deliveries that refuses, at connect time, every target
 * `checkWebhookUrl` would refuse: literal IPs are checked before connecting, names through the
 * socket's `lookup`, so the address checked is the address connected to. A refusal fails the request
 * with a `ForbiddenWebhookTargetError`.
 */
export function createGuardedAgent(options: GuardedAgentOptions): Agent {
  const connectViaGuardedLookup = buildConnector({
    lookup: guardedLookup(options),
    timeout: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
  });
  return new Agent({
    connect(connectOptions, callback) {
      const host = normaliseHost(connectOptions.hostname);
      // net.connect skips `lookup` for a literal IP, so literal IPs are refused here instead.
      if (!options.allowPrivate && !isExemptHost(host, options.allowHosts) && isIP(host) !== 0) {
        const reason = forbiddenAddressReason(host);
        if (reason !== null) {
          callback(new ForbiddenWebhookTargetError(`webhook target ${host} is ${reason}`), null);
          return;
        }
      }
      connectViaGuardedLookup(connectOptions, callback);
    },
  });
}

/** A net `lookup` that resolves every address and fails when the target is forbidden. */
function guardedLookup(policy: WebhookTargetPolicy): LookupFunction {
  const resolve = policy.resolve ?? resolveSystem;
  async function pick(hostname: string, family: number): Promise<ResolvedAddress[]> {
    const host = normaliseHost(hostname);
    const guarded = !policy.allowPrivate && !isExemptHost(host, policy.allowHosts);
    const nameReason = guarded ? forbiddenHostnameReason(host) : null;
    if (nameReason !== null)
      throw new ForbiddenWebhookTargetError(`webhook target ${host} is a ${nameReason}`);
    const all = await resolve(host);
    if (guarded) {
      for (const { address } of all) {
        const reason = forbiddenAddressReason(address);
        if (reason !== null) {
          throw new ForbiddenWebhookTargetError(
            `webhook target ${host} resolves to ${reason} address ${address}`,
          );
        }
      }
    }
    const wanted = family === 0 ? all : all.filter((a) => a.family === family);
    if (wanted.length === 0)
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    return wanted;
  }
  return (hostname, lookupOptions, callback) => {
    pick(hostname, familyNumber(lookupOptions.family)).then(
      (addresses) => {
        const first = addresses[0]!;
        if (lookupOptions.all) callback(null, addresses);
        else callback(null, first.address, first.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, []),
    );
  };
}

async function resolveSystem(hostname: string): Promise<ResolvedAddress[]> {
  return systemLookup(hostname, { all: true, verbatim: true });
}

function familyNumber(family: number | string | undefined): number {
  if (family === 4 || family === 'IPv4') return 4;
  if (family === 6 || family === 'IPv6') return 6;
  return 0;
}

/** Lower case, no IPv6 brackets, no trailing dot (`localhost.` is still localhost). */
function normaliseHost(hostname: string): string {
  let host = hostname.toLowerCase();
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  if (host.endsWith('.')) host = host.slice(0, -1);
  return host;
}

function isExemptHost(host: string, allowHosts: readonly string[] | undefined): boolean {
  return allowHosts?.some((allowed) => normaliseHost(allowed) === host) ?? false;
}

function stripZone(address: string): string {
  const percent = address.indexOf('%');
  return percent < 0 ? address : address.slice(0, percent);
}

/** The IPv4 address inside a NAT64 (64:ff9b::/96) or 6to4 (2002::/16) address, else null. */
function embeddedIpv4(address: string): string | null {
  const groups = ipv6Groups(address);
  if (groups === null) return null;
  const isNat64 = groups[0] === 0x64 && groups[1] === 0xff9b && groups.slice(2, 6).every((g) => g === 0);
  if (isNat64) return ipv4FromGroups(groups[6]!, groups[7]!);
  if (groups[0] === 0x2002) return ipv4FromGroups(groups[1]!, groups[2]!);
  return null;
}

function ipv4FromGroups(high: number, low: number): string {
  return [high >> 8, high & 0xff, low >> 8, low & 0xff].join('.');
}

/** The eight 16-bit groups of a valid IPv6 address (with `::` and a dotted IPv4 tail expanded). */
function ipv6Groups(address: string): number[] | null {
  let text = address;
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const octets = dotted[1]!.split('.').map(Number);
    const tail = `${((octets[0]! << 8) | octets[1]!).toString(16)}:${((octets[2]! << 8) | octets[3]!).toString(16)}`;
    text = text.slice(0, dotted.index) + tail;
  }
  const [head = '', rest] = text.split('::');
  const parse = (part: string): number[] =>
    part === '' ? [] : part.split(':').map((g) => Number.parseInt(g, 16));
  const left = parse(head);
  if (rest === undefined) return left.length === 8 ? left : null;
  const right = parse(rest);
  const missing = 8 - left.length - right.length;
  return missing < 0 ? null : [...left, ...new Array<number>(missing).fill(0), ...right];
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    timer.unref();
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}
