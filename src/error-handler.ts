import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify';
import { envelope, envelopeFor, GantryError, restEnvelope } from './errors.js';

const ALL_METHODS: HTTPMethods[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];

/** Maps fastify's own errors (body parsing, limits) onto the catalogue; anything unknown is a logged 500. */
export function toGantryError(err: FastifyError | Error): GantryError {
  if (err instanceof GantryError) return err;
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

/** Answers the methods a path does not serve with 405 and an Allow header, instead of a bare 404. */
export function rejectOtherMethods(app: FastifyInstance, url: string, allowed: HTTPMethods[]): void {
  const others = ALL_METHODS.filter(
    (m) => !allowed.includes(m) && !(m === 'HEAD' && allowed.includes('GET')),
  );
  const allow = allowed.join(', ');
  app.route({
    method: others,
    url,
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
