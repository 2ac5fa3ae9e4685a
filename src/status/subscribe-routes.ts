import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Gantry } from '../context.js';
import { rejectOtherMethods } from '../error-handler.js';
import { GantryError } from '../errors.js';
import {
  confirmPageSchema,
  confirmSchema,
  subscribeSchema,
  unsubscribePageSchema,
  unsubscribeSchema,
} from '../openapi/schemas/subscribe.js';
import { CONFIRM_PATH, UNSUBSCRIBE_PATH } from './mail-content.js';
import { PAGES, SUBSCRIBE_PATH } from './subscribe-form.js';

/** Form bodies here are one address or one token: anything larger is not ours. */
const FORM_BODY_LIMIT = 4_096;

// Pages holding a token: not cached, not indexed, no Referer leaving with the token, no scripts at all.
const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
  'content-security-policy':
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
};

/**
 * The status page's e-mail subscription (README, "Status page" → "E-mail subscriptions"), public, no key:
 * POST /status/subscribe (form or JSON); GET/POST /status/subscribe/confirm; GET/POST /status/unsubscribe
 * (the POST is also RFC 8058's one-click unsubscribe). GETs only show a page with a button: mail scanners
 * fetch links, and must not confirm or unsubscribe anyone. Registered only when e-mail is configured.
 */
export function registerSubscribeRoutes(app: FastifyInstance, gantry: Gantry): void {
  const subscriptions = gantry.plane.subscriptions;
  if (!subscriptions.enabled) return;
  // An encapsulated plugin: the form parsers below exist for these routes only, the API stays JSON.
  app.register(async (scope) => {
    scope.addContentTypeParser(
      'application/x-www-form-urlencoded',
      { parseAs: 'string', bodyLimit: FORM_BODY_LIMIT },
      (_request, body, done) => {
        const fields: Record<string, string> = {};
        for (const [key, value] of new URLSearchParams(body as string)) {
          if (!(key in fields)) fields[key] = value;
        }
        done(null, fields);
      },
    );
    // RFC 8058's example one-click POST is multipart/form-data; its only field (List-Unsubscribe=One-Click)
    // says nothing the URL does not, so the body is read and set aside.
    scope.addContentTypeParser(
      'multipart/form-data',
      { parseAs: 'string', bodyLimit: FORM_BODY_LIMIT },
      (_request, _body, done) => done(null, {}),
    );

    scope.post(SUBSCRIBE_PATH, { schema: subscribeSchema }, async (request, reply) => {
      const html = isForm(request);
      const outcome = await subscriptions.subscribe(field(request, 'email', false), request.ip);
      if (outcome === 'invalid') {
        if (html) return sendPage(reply, 400, PAGES.invalidAddress());
        throw new GantryError('INVALID_PARAMETER', {
          message: '`email` must be one e-mail address',
          param: 'email',
        });
      }
      if (outcome === 'rate_limited') {
        reply.header('retry-after', '3600');
        if (html) return sendPage(reply, 429, PAGES.tooMany());
        throw new GantryError('RATE_LIMIT_EXCEEDED', {
          message: 'Too many subscriptions from this address; try again later',
          headers: { 'retry-after': '3600' },
        });
      }
      if (html) return sendPage(reply, 200, PAGES.checkInbox());
      return reply.code(202).header('cache-control', 'no-store').send({
        status: 'pending',
        message: 'If the address can receive mail, a confirmation link is on its way.',
      });
    });

    scope.get(CONFIRM_PATH, { schema: confirmPageSchema }, async (request, reply) => {
      const token = field(request, 'token', true);
      if (typeof token === 'string' && (await subscriptions.checkConfirm(token)))
        return sendPage(reply, 200, PAGES.confirmAsk(CONFIRM_PATH, token));
      return sendPage(reply, 404, PAGES.confirmInvalid());
    });
    scope.post(CONFIRM_PATH, { schema: confirmSchema }, async (request, reply) => {
      if (await subscriptions.confirm(field(request, 'token', true)))
        return sendPage(reply, 200, PAGES.confirmed());
      return sendPage(reply, 404, PAGES.confirmInvalid());
    });

    scope.get(UNSUBSCRIBE_PATH, { schema: unsubscribePageSchema }, async (request, reply) => {
      const token = field(request, 'token', true);
      const state = await subscriptions.checkUnsubscribe(token);
      if (state === 'subscribed' && typeof token === 'string')
        return sendPage(reply, 200, PAGES.unsubscribeAsk(UNSUBSCRIBE_PATH, token));
      if (state === 'gone') return sendPage(reply, 200, PAGES.notSubscribed());
      return sendPage(reply, 404, PAGES.unsubscribeInvalid());
    });
    scope.post(UNSUBSCRIBE_PATH, { schema: unsubscribeSchema }, async (request, reply) => {
      const state = await subscriptions.unsubscribe(field(request, 'token', true));
      if (state === 'subscribed') return sendPage(reply, 200, PAGES.unsubscribed());
      // Already gone is success for a one-click client too: the address gets no more mail.
      if (state === 'gone') return sendPage(reply, 200, PAGES.notSubscribed());
      return sendPage(reply, 404, PAGES.unsubscribeInvalid());
    });

    rejectOtherMethods(scope, SUBSCRIBE_PATH, ['POST']);
    rejectOtherMethods(scope, CONFIRM_PATH, ['GET', 'POST']);
    rejectOtherMethods(scope, UNSUBSCRIBE_PATH, ['GET', 'POST']);
  });
}

function isForm(request: FastifyRequest): boolean {
  return (request.headers['content-type'] ?? '')
    .toLowerCase()
    .startsWith('application/x-www-form-urlencoded');
}

/** A field of the body (form or JSON), else (when `orQuery`) of the query string. */
function field(request: FastifyRequest, name: string, orQuery: boolean): unknown {
  const body = request.body as Record<string, unknown> | null | undefined;
  if (body && typeof body === 'object' && body[name] !== undefined) return body[name];
  if (!orQuery) return undefined;
  return (request.query as Record<string, unknown> | undefined)?.[name];
}

function sendPage(reply: FastifyReply, status: number, html: string): FastifyReply {
  return reply.code(status).headers(PAGE_HEADERS).send(html);
}
