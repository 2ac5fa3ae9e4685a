import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';

const MODEL = `
providers:
  a: { kind: openai, base_url: http://127.0.0.1:1/v1 }
  b: { kind: openai, base_url: http://127.0.0.1:2/v1 }
`;

function config(global: string, own: string) {
  return parseConfig(
    `${MODEL}
${global}
models:
  - namespace: acme/chat
    name: Chat
    type: text
    routes: [{ provider: a, model: m, weight: 3 }, { provider: b }]
    ${own}
`,
    'routing.yaml',
    {},
  );
}

describe('routing configuration', () => {
  it.each([
    {
      name: 'defaults: priority, breaker on, no first-token limit, probes off',
      global: '',
      own: '',
      expected: {
        strategy: 'priority',
        firstTokenMs: undefined,
        breaker: {
          consecutiveFailures: 5,
          errorRate: 0.5,
          minRequests: 20,
          windowMs: 30_000,
          cooldownMs: 15_000,
          halfOpenRequests: 1,
        },
      },
      probes: false,
    },
    {
      name: 'the global block sets every model',
      global:
        'routing: { strategy: latency, first_token_ms: 900, breaker: { cooldown_seconds: 2 }, probes: { enabled: true } }',
      own: '',
      expected: {
        strategy: 'latency',
        firstTokenMs: 900,
        breaker: { cooldownMs: 2_000, consecutiveFailures: 5 },
      },
      probes: true,
    },
    {
      name: "a model's own keys win, key by key",
      global: 'routing: { strategy: latency, breaker: { cooldown_seconds: 2, consecutive_failures: 9 } }',
      own: 'routing: { strategy: weighted, breaker: { consecutive_failures: 3 } }',
      expected: { strategy: 'weighted', breaker: { cooldownMs: 2_000, consecutiveFailures: 3 } },
      probes: false,
    },
  ])('$name', ({ global, own, expected, probes }) => {
    const c = config(global, own);
    expect(c.models[0]?.routing).toMatchObject(expected);
    expect(c.routing.probes.enabled).toBe(probes);
    expect(c.models[0]?.routes).toEqual([
      { provider: 'a', model: 'm', weight: 3 },
      { provider: 'b', model: 'acme/chat' },
    ]);
  });

  it.each([
    ['an unknown strategy', 'routing: { strategy: fastest }', '/models/0/routing/strategy'],
    ['a negative weight', '', '/models/0/routes'],
  ])('refuses %s at load', (_name, own, where) => {
    const yaml =
      _name === 'a negative weight'
        ? `${MODEL}\nmodels:\n  - { namespace: x/y, name: X, type: text, routes: [{ provider: a, weight: -1 }] }\n`
        : `${MODEL}\nmodels:\n  - namespace: x/y\n    name: X\n    type: text\n    routes: [{ provider: a }]\n    ${own}\n`;
    expect(() => parseConfig(yaml, 'routing.yaml', {})).toThrow(where);
  });
});
