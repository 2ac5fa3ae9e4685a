/**
 * fromUpstream, the one place an upstream's failure becomes what the client sees (README "Upstream
 * failures"): statuses relayed or not, OpenAI codes kept or derived from Anthropic's types, overload.
 */
import { describe, expect, it } from 'vitest';
import { UpstreamError } from '../../providers/upstream-error.js';
import { fromUpstream } from '../../src/inference/upstream-errors.js';

const status = (s: number, extra: ConstructorParameters<typeof UpstreamError>[3] = {}) =>
  fromUpstream(new UpstreamError('status', 'up', `up answered HTTP ${s}`, { status: s, ...extra }));

describe('fromUpstream', () => {
  it('relays 400, 409, 413 and 422 with their status, message, param and code (null included)', () => {
    const cases: Array<[number, string]> = [
      [400, 'INVALID_REQUEST'],
      [409, 'CONFLICT'],
      [413, 'PAYLOAD_TOO_LARGE'],
      [422, 'UNPROCESSABLE_ENTITY'],
    ];
    for (const [s, id] of cases) {
      const err = status(s, { upstreamMessage: 'no', param: 'input', code: 'some_code' });
      expect([err.errorId, err.status, err.message, err.param, err.code], String(s)).toEqual([
        id,
        s,
        'no',
        'input',
        'some_code',
      ]);
    }
    expect(status(400, { upstreamMessage: 'no', code: null }).code).toBeNull();
    // No code key at all (vLLM's is a number, not kept): the catalogue's.
    expect(status(400, { upstreamMessage: 'no' }).code).toBe('invalid_request');
  });

  it('relays a 404 only when a code names what is missing, and not model_not_found', () => {
    const gone = status(404, { upstreamMessage: 'gone', code: 'previous_response_not_found' });
    expect([gone.errorId, gone.status, gone.code]).toEqual([
      'RESPONSE_NOT_FOUND',
      404,
      'previous_response_not_found',
    ]);
    expect(status(404, { upstreamMessage: 'x', code: 'file_not_found' }).errorId).toBe('NOT_FOUND');
    for (const extra of [{ code: 'model_not_found' }, { code: null }, {}, { type: 'not_found_error' }]) {
      const err = status(404, { upstreamMessage: "The model 'internal-7b' does not exist", ...extra });
      expect([err.errorId, err.status, err.details], JSON.stringify(extra)).toEqual([
        'UPSTREAM_ERROR',
        502,
        '',
      ]);
      expect(err.message).not.toContain('internal-7b');
    }
  });

  it('never relays what a 401 or 403 said', () => {
    for (const s of [401, 403]) {
      const err = status(s, { upstreamMessage: 'Incorrect API key sk-123', code: 'invalid_api_key' });
      expect([err.errorId, err.status, err.code, err.details]).toEqual([
        'UPSTREAM_ERROR',
        502,
        'upstream_error',
        '',
      ]);
    }
  });

  it('makes a 429 about Gantry’s quota with the provider a 502, not the client’s rate limit', () => {
    const quota = [
      { type: 'insufficient_quota', code: 'credit_balance_exhausted' },
      { type: 'insufficient_quota', code: null },
      { type: 'requests', code: 'insufficient_quota' },
    ];
    for (const extra of quota) {
      const err = status(429, {
        upstreamMessage: 'You exceeded your current quota',
        retryAfter: '5',
        ...extra,
      });
      expect([err.errorId, err.status, err.code, err.details, err.headers], JSON.stringify(extra)).toEqual([
        'UPSTREAM_ERROR',
        502,
        'upstream_error',
        '',
        undefined,
      ]);
    }
    const limited = status(429, { type: 'requests', code: 'rate_limit_exceeded', upstreamMessage: 'x' });
    expect([limited.errorId, limited.status]).toEqual(['RATE_LIMIT_EXCEEDED', 429]);
  });

  it('makes every overload one 503 with Retry-After, the upstream’s or 1 s', () => {
    const overloads = [
      status(503),
      status(529, { type: 'overloaded_error', upstreamMessage: 'Overloaded' }),
      status(503, { type: 'overloaded_error' }),
      status(502, { code: 'server_is_overloaded' }),
    ];
    for (const err of overloads) {
      expect([err.errorId, err.status, err.code, err.headers]).toEqual([
        'UPSTREAM_OVERLOADED',
        503,
        'server_is_overloaded',
        { 'retry-after': '1' },
      ]);
      expect(err.message).not.toMatch(/HTTP \d/);
    }
    expect(status(503, { retryAfter: '30' }).headers).toEqual({ 'retry-after': '30' });
    expect(status(503, { code: 'slow_down' }).code).toBe('slow_down');
    expect(new UpstreamError('status', 'up', 'x', { status: 529 }).retryable).toBe(true);
    expect(new UpstreamError('status', 'up', 'x', { status: 503 }).overloaded).toBe(true);
    expect(new UpstreamError('timeout', 'up', 'x').overloaded).toBe(false);
  });

  it('gives Anthropic’s error types OpenAI’s codes', () => {
    const tooLong = status(400, {
      type: 'invalid_request_error',
      upstreamMessage: 'prompt is too long: 208656 tokens > 200000 maximum',
    });
    expect([tooLong.errorId, tooLong.code]).toEqual(['INVALID_REQUEST', 'context_length_exceeded']);
    expect(status(400, { type: 'invalid_request_error', upstreamMessage: 'x' }).code).toBeNull();
    expect(status(413, { type: 'request_too_large', upstreamMessage: 'x' }).code).toBeNull();
    const limited = status(429, { type: 'rate_limit_error', retryAfter: '7', upstreamMessage: 'x' });
    expect([limited.errorId, limited.code, limited.headers]).toEqual([
      'RATE_LIMIT_EXCEEDED',
      'rate_limit_exceeded',
      { 'retry-after': '7' },
    ]);
    expect(status(500, { type: 'api_error' }).errorId).toBe('UPSTREAM_ERROR');
    // A type that is no Anthropic type (nor an Object.prototype key) leaves the catalogue's code.
    expect(status(400, { type: 'toString', upstreamMessage: 'x' }).code).toBe('invalid_request');
  });
});
