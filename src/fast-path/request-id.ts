const MAX_SMI = 2147483647;
let last = 0;

/**
 * Request ids as fastify makes them (`req-<base36 counter>`), from one counter shared by fastify (its
 * `genReqId` option) and the fast path, so the two never hand out the same id. A client's `x-request-id`
 * still wins in both.
 */
export function nextRequestId(): string {
  last = (last + 1) & MAX_SMI;
  return `req-${last.toString(36)}`;
}
