import { createServer } from 'node:net';
import OpenAI from 'openai';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loggerOptions } from '../../src/logger.js';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';

const UPSTREAM_SECRET = 'sk-upstream-secret-value-0123456789';

describe('secrets never reach the logs', () => {
  const lines: string[] = [];
  let gantry: TestGantry;
  let deadPort: number;

  beforeAll(async () => {
    // A port nobody listens on: the upstream call fails and is logged.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    deadPort = (probe.address() as { port: number }).port;
    await new Promise((r) => probe.close(r));
    const yaml = LOCAL_CONFIG.replace(
      'providers:\n  local: { kind: local }',
      `providers:\n  local: { kind: local }\n  dead: { kind: openai, base_url: "http://127.0.0.1:${deadPort}/v1", api_key_env: DEAD_KEY }`,
    ).replace(
      'routes: [{ provider: local, model: local-chat }]',
      'routes: [{ provider: dead }, { provider: local, model: local-chat }]',
    );
    gantry = await startGantry(yaml, { DEAD_KEY: UPSTREAM_SECRET }, { onLog: (line) => lines.push(line) });
  });
  afterAll(() => gantry.close());

  it('logs requests and upstream failures without any key', async () => {
    const client = new OpenAI({ baseURL: gantry.baseURL, apiKey: gantry.key, maxRetries: 0 });
    const completion = await client.chat.completions.create({
      model: 'gantry/local-chat',
      messages: [{ role: 'user', content: 'hello' }],
    });
    expect(completion.choices[0]?.message.content).toContain('hello');
    await new OpenAI({ baseURL: gantry.baseURL, apiKey: 'gty_wrong-key-abcdef', maxRetries: 0 }).models
      .list()
      .catch(() => undefined);
    const all = lines.join('\n');
    // The logs did record the traffic, including the failed upstream...
    expect(all).toContain('"url":"/v1/chat/completions"');
    expect(all).toContain('upstream failed');
    // ...but no credential of any kind.
    expect(all).not.toContain(gantry.key);
    expect(all).not.toContain('gty_wrong-key-abcdef');
    expect(all).not.toContain(UPSTREAM_SECRET);
  });

  it('redacts credential fields wherever they appear in a log object', () => {
    const out: string[] = [];
    const log = pino(loggerOptions('info'), { write: (line: string) => out.push(line) });
    log.info({
      req: { headers: { authorization: 'Bearer gty_a', 'x-api-key': 'gty_b' } },
      headers: { authorization: 'Bearer gty_c' },
      input: { api_key: 'sk-d' },
      webhook: { auth_token: 'tok-e' },
    });
    const text = out.join('');
    for (const secret of ['gty_a', 'gty_b', 'gty_c', 'sk-d', 'tok-e']) expect(text).not.toContain(secret);
    expect(text).toContain('[redacted]');
  });
});
