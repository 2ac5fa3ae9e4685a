/**
 * A webhook receiver for tests: a real HTTP server on 127.0.0.1 (random port) that records every
 * delivery (headers, raw body, parsed JSON) and checks its signatures with the official
 * `standardwebhooks` library and Gantry's own `Gantry-Signature` verifier, as a customer would.
 * Answers are scripted: queued one-shots first (`nextResponses`), then the default (200).
 *
 *   const receiver = await startWebhookReceiver({ secret });
 *   receiver.nextResponses({ status: 500 }, { status: 429, retryAfter: 1 }, 'hang', 'close');
 *   const [first] = await receiver.waitFor(1);
 *   expect(first.signatureValid).toBe(true);
 *   await receiver.close();
 */
import type { IncomingHttpHeaders } from 'node:http';
import { Webhook } from 'standardwebhooks';
import { verifyGantrySignature } from '../../src/webhooks/sign.js';
import {
  type Exchange,
  type JsonObject,
  type RecordedExchange,
  sendJson,
  sleep,
  startRecordingServer,
  waitUntil,
} from './fake-server.js';

/**
 * How the receiver answers one delivery:
 * - an HTTP answer (`retryAfter` sets the Retry-After header, `delayMs` waits before answering);
 * - `'hang'`: read the request and never answer, until the sender gives up;
 * - `'close'`: read the request and destroy the socket without answering.
 */
export type ReceiverReply =
  | {
      status: number;
      retryAfter?: number | string;
      headers?: Record<string, string>;
      body?: string;
      delayMs?: number;
    }
  | 'hang'
  | 'close';

export interface ReceivedWebhook {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The body exactly as received (what signatures cover). */
  rawBody: string;
  /** The body parsed as a JSON object, or undefined. */
  body: JsonObject | undefined;
  /** `webhook_event_type` of the body, when present. */
  event: string | undefined;
  /** How the receiver answered this delivery. */
  reply: ReceiverReply;
  /** Standard Webhooks check with the receiver's secret; undefined when started without a secret. */
  signatureValid: boolean | undefined;
  /** Why the Standard Webhooks check failed. */
  signatureError: string | undefined;
  /** `Gantry-Signature` check with the receiver's secret; undefined when started without a secret. */
  gantrySignatureValid: boolean | undefined;
  /** True once the sender closed the connection before the answer was complete (e.g. its timeout). */
  readonly aborted: boolean;
}

export interface WebhookReceiverOptions {
  /** The `whsec_` secret deliveries are signed with; enables the signature checks. */
  secret?: string;
  /** Path of `url` (default `/webhook`); requests to any path are recorded. */
  path?: string;
}

export interface WebhookReceiver {
  /** Where to point `webhook.url`, e.g. `http://127.0.0.1:PORT/webhook`. */
  url: string;
  origin: string;
  port: number;
  /** Every delivery so far, in arrival order. */
  readonly requests: ReceivedWebhook[];
  /** Queues one-shot answers for the next deliveries, in order. */
  nextResponses(...replies: ReceiverReply[]): void;
  /** The answer used when the queue is empty (initially 200 `{}`). */
  setDefaultResponse(reply: ReceiverReply): void;
  /** Resolves with the deliveries once at least `count` arrived; rejects after `timeoutMs` (default 5000). */
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedWebhook[]>;
  /** Forgets deliveries and queued answers; the default answer goes back to 200. */
  reset(): void;
  close(): Promise<void>;
}

const OK: ReceiverReply = { status: 200, body: '{}' };

export async function startWebhookReceiver(options: WebhookReceiverOptions = {}): Promise<WebhookReceiver> {
  const { secret, path = '/webhook' } = options;
  const verifier = secret === undefined ? undefined : new Webhook(secret);
  const views = new WeakMap<RecordedExchange<ReceiverReply>, ReceivedWebhook>();

  const server = await startRecordingServer<ReceiverReply>(answer, {
    name: 'webhook receiver',
    behavior: OK,
    errorBody: (message) => ({ error: message }),
  });

  function view(record: RecordedExchange<ReceiverReply>): ReceivedWebhook {
    let received = views.get(record);
    if (received === undefined) {
      received = describe(record, secret, verifier);
      views.set(record, received);
    }
    return received;
  }

  return {
    url: `${server.origin}${path}`,
    origin: server.origin,
    port: server.port,
    get requests() {
      return server.requests.map(view);
    },
    nextResponses(...replies) {
      server.enqueue(...replies);
    },
    setDefaultResponse(reply) {
      server.setBehavior(reply);
    },
    async waitFor(count, timeoutMs = 5000) {
      return (await server.waitForRequests(count, timeoutMs)).map(view);
    },
    reset() {
      server.reset();
    },
    close() {
      return server.close();
    },
  };
}

/** Same as `startWebhookReceiver`, under the short name the end-to-end tests use. */
export const start = startWebhookReceiver;

async function answer(exchange: Exchange<ReceiverReply>): Promise<void> {
  const reply = exchange.behavior;
  if (reply === 'hang') return waitUntil(exchange.gone);
  if (reply === 'close') return exchange.cut();
  if (reply.delayMs) await sleep(reply.delayMs, exchange.gone);
  if (exchange.gone.aborted) return;
  const headers = { ...reply.headers };
  if (reply.retryAfter !== undefined) headers['retry-after'] = String(reply.retryAfter);
  sendJson(exchange.res, reply.status, reply.body ?? '{}', headers);
}

function describe(
  record: RecordedExchange<ReceiverReply>,
  secret: string | undefined,
  verifier: Webhook | undefined,
): ReceivedWebhook {
  const rawBody = record.rawBody.toString('utf8');
  const eventType = record.body?.webhook_event_type;
  let signatureValid: boolean | undefined;
  let signatureError: string | undefined;
  let gantrySignatureValid: boolean | undefined;
  if (secret !== undefined && verifier !== undefined) {
    try {
      verifier.verify(rawBody, {
        'webhook-id': header(record.headers, 'webhook-id'),
        'webhook-timestamp': header(record.headers, 'webhook-timestamp'),
        'webhook-signature': header(record.headers, 'webhook-signature'),
      });
      signatureValid = true;
    } catch (err) {
      signatureValid = false;
      signatureError = err instanceof Error ? err.message : String(err);
    }
    gantrySignatureValid = verifyGantrySignature({
      secret,
      header: header(record.headers, 'gantry-signature'),
      body: rawBody,
    });
  }
  return {
    method: record.method,
    path: record.path,
    headers: record.headers,
    rawBody,
    body: record.body,
    event: typeof eventType === 'string' ? eventType : undefined,
    reply: record.behavior,
    signatureValid,
    signatureError,
    gantrySignatureValid,
    get aborted() {
      return record.aborted;
    },
  };
}

function header(headers: IncomingHttpHeaders, name: string): string {
  const value = headers[name];
  return Array.isArray(value) ? (value[0] ?? '') : (value ?? '');
}
