import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';

let gantry: TestGantry;
beforeAll(async () => {
  gantry = await startGantry(
    LOCAL_CONFIG.replace('providers:', 'server: { body_limit_bytes: 2048 }\nproviders:'),
  );
});
afterAll(() => gantry.close());

async function send(method: string, path: string, body?: string, contentType = 'application/json') {
  const res = await fetch(gantry.origin + path, {
    method,
    headers: { 'x-api-key': gantry.key, ...(body === undefined ? {} : { 'content-type': contentType }) },
    ...(body === undefined ? {} : { body }),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: JSON.parse(text) as Record<string, unknown> };
}

const inferenceError = (errorId: string, status: number) => ({
  error: { error_id: errorId, http_status: status, code: errorId.toLowerCase() },
});

describe('errors are always enveloped', () => {
  it('malformed JSON is 400 INVALID_REQUEST in the inference envelope', async () => {
    const res = await send('POST', '/v1/chat/completions', '{"model": "gantry/local-chat", "messages": [');
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject(inferenceError('INVALID_REQUEST', 400));
    expect(res.body).not.toHaveProperty('status');
    expect((res.body.error as { type: string }).type).toBe('invalid_request_error');
  });

  it('a body that is not an object is 400 INVALID_REQUEST', async () => {
    for (const body of ['[]', '"text"', '42', 'null']) {
      const res = await send('POST', '/v1/embeddings', body);
      expect(res.status, body).toBe(400);
      expect(res.body, body).toMatchObject(inferenceError('INVALID_REQUEST', 400));
    }
  });

  it('a wrong Content-Type is 400 UNSUPPORTED_MEDIA_TYPE', async () => {
    const res = await send('POST', '/v1/chat/completions', 'hello', 'text/plain');
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject(inferenceError('UNSUPPORTED_MEDIA_TYPE', 400));
  });

  it('an oversized body is 413 PAYLOAD_TOO_LARGE', async () => {
    const big = JSON.stringify({
      model: 'gantry/local-chat',
      messages: [{ role: 'user', content: 'x'.repeat(5000) }],
    });
    const res = await send('POST', '/v1/chat/completions', big);
    expect(res.status).toBe(413);
    expect(res.body).toMatchObject(inferenceError('PAYLOAD_TOO_LARGE', 413));
  });

  it('an unknown route is 404 NOT_FOUND in the REST envelope', async () => {
    const res = await send('GET', '/v1/nothing-here');
    expect(res.status).toBe(404);
    expect(res.body).toMatchObject({ status: false, error: { error_id: 'NOT_FOUND', http_status: 404 } });
    const outside = await send('GET', '/elsewhere');
    expect(outside.status).toBe(404);
    expect(outside.body).toMatchObject({ status: false, error: { error_id: 'NOT_FOUND' } });
  });

  it('a wrong method is 405 with Allow', async () => {
    const res = await send('GET', '/v1/chat/completions');
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
    expect(res.body).toMatchObject(inferenceError('METHOD_NOT_ALLOWED', 405));
    const models = await send('DELETE', '/v1/models');
    expect(models.status).toBe(405);
    expect(models.body).toMatchObject({ status: false, error: { error_id: 'METHOD_NOT_ALLOWED' } });
  });

  it('an unauthenticated unknown route is 401, not 404', async () => {
    const res = await fetch(`${gantry.origin}/v1/nothing-here`);
    expect(res.status).toBe(401);
  });

  it('the health check needs no key', async () => {
    const res = await fetch(`${gantry.origin}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok' });
  });
});
