import type { FastifyReply } from 'fastify';
import type { InferenceAnswer } from '../inference/exchange.js';
import { JsonText } from '../inference/rename.js';

/** The content type fastify's reply.send(object) uses, kept for JSON sent as text. */
export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/** A handler's answer through fastify: JSON text is sent as it is, a body is serialised by fastify. */
export function sendAnswer(reply: FastifyReply, answer: InferenceAnswer): unknown {
  if (answer instanceof JsonText) return reply.type(JSON_CONTENT_TYPE).send(answer.text);
  return answer;
}
