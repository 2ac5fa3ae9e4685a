import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, packageRoot, parseConfig } from '../src/config/load.js';

const MINIMAL = `
providers:
  up: { kind: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: UP_KEY, timeouts: { connect_ms: 100 } }
models:
  - namespace: vendor/model-a
    name: A
    type: text
    routes: [{ provider: up, model: served-name }]
`;

function problem(yaml: string, env: NodeJS.ProcessEnv = { UP_KEY: 'k' }): string {
  try {
    parseConfig(yaml, 'gantry.yaml', env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('the config was accepted');
}

describe('configuration', () => {
  it('loads the embedded default with the local models', () => {
    const config = loadConfig(join(packageRoot(), 'config', 'gantry.yaml'), {});
    expect(config.providers.map((p) => p.kind)).toEqual(['local']);
    expect(config.models.map((m) => m.namespace)).toEqual(['gantry/local-chat', 'gantry/local-embed']);
    expect(config.models[0]?.description).toMatch(/local test model/i);
    expect(config.models[0]?.defaults).toEqual({ temperature: 0.7, top_p: 0.95, max_tokens: 8192 });
    expect(config.server.port).toBe(8080);
  });

  it('reads credentials from the environment and fills defaults', () => {
    const config = parseConfig(MINIMAL, 'gantry.yaml', { UP_KEY: 'secret' });
    const provider = config.providers[0];
    expect(provider?.apiKey).toBe('secret');
    expect(provider?.timeouts.connectMs).toBe(100);
    expect(provider?.timeouts.firstByteMs).toBeGreaterThan(0);
    expect(config.models[0]?.routes).toEqual([{ provider: 'up', model: 'served-name' }]);
    expect(config.models[0]?.serves).toEqual(['inference']);
  });

  it('PORT and HOST override the file', () => {
    const config = parseConfig(MINIMAL, 'gantry.yaml', { UP_KEY: 'k', PORT: '9999', HOST: '0.0.0.0' });
    expect(config.server).toMatchObject({ port: 9999, host: '0.0.0.0' });
    expect(problem(MINIMAL, { UP_KEY: 'k', PORT: 'eighty' })).toMatch(/PORT/);
  });

  it('names the path and the problem of a bad file', () => {
    expect(problem(MINIMAL, {})).toBe(
      'gantry.yaml: /providers/up/api_key_env: environment variable UP_KEY is not set',
    );
    expect(problem(MINIMAL.replace('kind: openai', 'kind: nope'))).toMatch(
      /^gantry\.yaml: \/providers\/up\/kind: .*openai, anthropic, local/,
    );
    expect(problem(MINIMAL.replace('provider: up', 'provider: down'))).toBe(
      'gantry.yaml: /models/0/routes/0/provider: unknown provider "down"',
    );
    expect(problem(MINIMAL.replace('name: A', 'name: A\n    colour: blue'))).toMatch(
      /\/models\/0: .*\(colour\)/,
    );
    expect(problem(MINIMAL.replace('connect_ms: 100', 'connect_ms: -1'))).toMatch(
      /\/providers\/up\/timeouts\/connect_ms/,
    );
    expect(problem('providers: [')).toMatch(/^gantry\.yaml: invalid YAML/);
    expect(
      problem(
        `${MINIMAL}  - namespace: vendor/model-a\n    name: B\n    type: text\n    routes: [{ provider: up }]\n`,
      ),
    ).toMatch(/duplicate model "vendor\/model-a"/);
  });

  it('reports an unreadable file by its path', () => {
    const dir = mkdtempSync(join(tmpdir(), 'gantry-config-'));
    expect(() => loadConfig(join(dir, 'missing.yaml'))).toThrow(
      /missing\.yaml: cannot read the file \(ENOENT\)/,
    );
    const file = join(dir, 'bad.yaml');
    writeFileSync(file, 'server: { port: "x" }');
    expect(() => loadConfig(file)).toThrow(/bad\.yaml: \/server\/port: must be integer/);
  });
});
