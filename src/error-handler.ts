import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify';
import { ProviderRequestError, type RefusalReason } from '../providers/request-error.js';
import { type ErrorId, envelope, envelopeFor, GantryError, restEnvelope } from './errors.js';

const ALL_METHODS: HTTPMethods[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];

/** fastify's `maxParamLength`: longer path parameters are 414 URI_TOO_LONG before any route runs. */
export const MAX_PARAM_LENGTH = 100;

/** The catalogue entry of each refusal a provider adapter makes before calling its backend. */
const REFUSALS: Record<RefusalReason, ErrorId> = {
  invalid_parameter: 'INVALID_PARAMETER',
  missing_required_field: 'MISSING_REQUIRED_FIELD',
  not_supported: 'MODEL_NOT_SUPPORTED',
};

/** Maps provider refusals and fastify's own errors (body parsing, limits) onto the catalogue; anything unknown is a logged 500. */
export function toGantryError(err: FastifyError | Error): GantryError {
  if (err instanceof GantryError) return err;
  if (err instanceof ProviderRequestError) {
    return new GantryError(REFUSALS[err.reason], {
      message: err.message,
      param: err.param,
      ...(err.code ? { code: err.code } : {}),
      cause: err,
    });
  }
  const code = (err as FastifyError).code;
  switch (code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new GantryError('UNSUPPORTED_MEDIA_TYPE', {
        details: 'Send the body as JSON with Content-Type: application/json.',
      });
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new GantryError('INVALID_REQUEST', { message: `Malformed JSON body: ${err.message}` });
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new GantryError('PAYLOAD_TOO_LARGE', { message: err.message });
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new GantryError('INVALID_REQUEST', { message: err.message });
    case 'FST_ERR_BAD_URL':
      return new GantryError('INVALID_REQUEST', {
        message: 'The path is not validly percent-encoded',
        details: 'Encode `%` as %25 in path segments.',
      });
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return new GantryError('URI_TOO_LONG', {
        message: `A path segment is longer than ${MAX_PARAM_LENGTH} characters`,
        details: 'Ids and names in paths are shorter; use them as the API returned them.',
      });
  }
  if (err instanceof SyntaxError || (err as { statusCode?: number }).statusCode === 400) {
    return new GantryError('INVALID_REQUEST', { message: `Malformed request: ${err.message}` });
  }
  const status = (err as { statusCode?: number }).statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    return new GantryError('INVALID_REQUEST', { message: err.message, status });
  }
  return new GantryError('INTERNAL_ERROR', { cause: err });
}

export function sendError(request: FastifyRequest, reply: FastifyReply, err: GantryError): FastifyReply {
  request.errorId = err.errorId;
  if (err.headers) reply.headers(err.headers);
  return reply.code(err.status).send(envelope(envelopeFor(request.url), err));
}

export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const err = toGantryError(error);
    if (err.status >= 500) request.log.error({ err: error }, 'request failed');
    return sendError(request, reply, err);
  });

  // Unknown routes are not inference calls, so they get the REST envelope whatever their path.
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0];
    const err = new GantryError('NOT_FOUND', {
      message: `No route ${request.method} ${path}`,
      details: 'See the API reference.',
    });
    return reply.code(err.status).send(restEnvelope(err));
  });
}

/**
 * fastify's `frameworkErrors`: errors of the router, before any hook or route (a path that is not
 * validly percent-encoded, a path parameter over MAX_PARAM_LENGTH), in the catalogue's envelopes.
 */
export function frameworkError(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  void sendError(request, reply, toGantryError(error));
}

/**
 * fastify's `clientErrorHandler`: errors of Node's HTTP parser and server timers, before a request
 * exists (a malformed request line or header, an unknown method, headers over the size limit, headers
 * or a body that did not arrive within the server's timeouts). Answered in the REST envelope (there is
 * no parsed path to choose another) where nothing of a response was written yet, as Node's own handler
 * decides; then the connection is closed.
 */
export function clientError(error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
  if (socket.writable && !inFlight?.headersSent) {
    const err = connectionError(error.code);
    const body = JSON.stringify(restEnvelope(err));
    socket.write(
      `HTTP/1.1 ${err.status} ${STATUS_TEXT[err.status] ?? 'Bad Request'}\r\nconnection: close\r\n` +
        `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  }
  socket.destroySoon();
}

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
};

function connectionError(code: string | undefined): GantryError {
  switch (code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new GantryError('REQUEST_TIMEOUT', {
        details: 'Send the headers and the body without pauses; see server timeouts in the README.',
      });
    case 'HPE_HEADER_OVERFLOW':
      return new GantryError('HEADERS_TOO_LARGE');
    case 'HPE_INVALID_METHOD':
      return new GantryError('METHOD_NOT_ALLOWED', {
        message: 'Unknown HTTP method',
        details: 'Gantry serves GET, HEAD, POST, DELETE (see the API reference).',
      });
    default:
      return new GantryError('INVALID_REQUEST', {
        message: 'Malformed HTTP request',
        details: code ?? '',
      });
  }
}

/** Answers the methods a path does not serve with 405 and an Allow header, instead of a bare 404. */
export function rejectOtherMethods(app: FastifyInstance, url: string, allowed: HTTPMethods[]): void {
  const others = ALL_METHODS.filter(
    (m) => !allowed.includes(m) && !(m === 'HEAD' && allowed.includes('GET')),
  );
  const allow = allowed.join(', ');
  app.route({
    method: others,
    url,
    // Not part of the API: left out of the OpenAPI document.
    schema: { hide: true },
    handler: (request, reply) => {
      reply.header('allow', allow);
      return sendError(
        request,
        reply,
        new GantryError('METHOD_NOT_ALLOWED', {
          message: `${request.method} is not allowed here; use ${allow}`,
        }),
      );
    },
  });
}
