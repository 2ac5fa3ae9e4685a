/**
 * The safety layer's core (README, "Safety"): Azure-shaped results under a policy, policy precedence,
 * the config checks, masking, stream windows, and the verdicts of the prompt and completion checks.
 */
import { describe, expect, it } from 'vitest';
import { hashKey } from '../../src/auth/keys.js';
import { ConfigError, parseConfig } from '../../src/config/load.js';
import { GantryError, inferenceEnvelope } from '../../src/errors.js';
import { evaluate } from '../../src/safety/azure.js';
import {
  ClassifierUnavailable,
  type Findings,
  mergeFindings,
  type TextClassifier,
} from '../../src/safety/classifier.js';
import {
  type ActiveSafety,
  activeSafety,
  blockedPromptError,
  checkCompletion,
  checkPrompt,
  promptFilterResults,
} from '../../src/safety/engine.js';
import {
  keyPoliciesById,
  PRESET_POLICIES,
  resolvePolicy,
  type SafetyPolicy,
} from '../../src/safety/policy.js';
import { chatPromptParts, responsesPromptParts } from '../../src/safety/prompt-text.js';
import { maskText } from '../../src/safety/redact.js';
import { buildClassifiers } from '../../src/safety/registry.js';
import { MAX_WINDOW, TextWindows } from '../../src/safety/window.js';

const annotate = PRESET_POLICIES.annotate as SafetyPolicy;
const block = PRESET_POLICIES.block as SafetyPolicy;

const found: Findings = {
  harm: { hate: 'safe', sexual: 'low', violence: 'medium', self_harm: 'high' },
  detected: {
    jailbreak: true,
    indirect_attack: false,
    profanity: true,
    pii: false,
    protected_material_text: true,
  },
};

describe('evaluate: findings under a policy → Azure results', () => {
  it.each([
    ['annotate, prompt', annotate, 'prompt', false],
    ['block, prompt', block, 'prompt', true],
  ] as const)('%s', (_name, policy, source, blocks) => {
    const { results, flagged } = evaluate(found, policy, source);
    expect(results).toEqual({
      hate: { filtered: false, severity: 'safe' },
      sexual: { filtered: false, severity: 'low' },
      violence: { filtered: blocks, severity: 'medium' },
      self_harm: { filtered: blocks, severity: 'high' },
      jailbreak: { filtered: blocks, detected: true },
      indirect_attack: { filtered: false, detected: false },
      profanity: { filtered: false, detected: true },
      pii: { filtered: false, detected: false },
    });
    // Profanity is reported but not filtered by default; medium and high are over the default threshold.
    expect(flagged).toEqual(['violence', 'self_harm', 'jailbreak']);
  });

  it('a completion reports protected material and no prompt attacks', () => {
    const { results, flagged } = evaluate(found, block, 'completion');
    expect(Object.keys(results)).toEqual([
      'hate',
      'sexual',
      'violence',
      'self_harm',
      'profanity',
      'protected_material_text',
      'pii',
    ]);
    expect(flagged).toEqual(['violence', 'self_harm', 'protected_material_text']);
  });

  it('thresholds and filters come from the policy; categories not evaluated are left out', () => {
    const strict: SafetyPolicy = {
      ...block,
      thresholds: { hate: 'off', sexual: 'low', violence: 'high', self_harm: 'high' },
      filter: { ...block.filter, profanity: true, jailbreak: false },
    };
    const { results, flagged } = evaluate(
      { harm: { sexual: 'low', violence: 'medium' }, detected: { profanity: true, jailbreak: true } },
      strict,
      'prompt',
    );
    expect(flagged).toEqual(['sexual', 'profanity']);
    expect(results).toEqual({
      sexual: { filtered: true, severity: 'low' },
      violence: { filtered: false, severity: 'medium' },
      jailbreak: { filtered: false, detected: true },
      profanity: { filtered: true, detected: true },
    });
  });

  it('merged findings keep the highest severity and any detection', () => {
    const merged = mergeFindings([
      { harm: { hate: 'low' }, detected: { jailbreak: false }, pii: [{ kind: 'email', start: 0, end: 3 }] },
      { harm: { hate: 'high', violence: 'safe' }, detected: { jailbreak: true } },
      { harm: { hate: 'medium' }, detected: { jailbreak: false } },
    ]);
    expect(merged).toEqual({ harm: { hate: 'high', violence: 'safe' }, detected: { jailbreak: true } });
  });
});

const CONFIG = (safety: string, extra = '') => `
providers:
  local: { kind: local }
models:
  - namespace: m/plain
    name: Plain
    type: text
    routes: [{ provider: local }]
  - namespace: m/strict
    name: Strict
    type: text
    routes: [{ provider: local }]
    safety: strict
accounts:
  - name: acme
    safety: annotate
    keys:
      - { name: ci, key_env: KEY_CI, safety: off }
      - { name: web, key_env: KEY_WEB }
${safety}
${extra}`;
const ENV = { KEY_CI: 'k'.repeat(40), KEY_WEB: 'w'.repeat(40) };
const SAFETY = `
safety:
  default: redact
  policies:
    strict: { mode: block, thresholds: { violence: low }, filter: { profanity: true } }
`;

describe('policies from the config', () => {
  const config = parseConfig(CONFIG(SAFETY), 'test.yaml', ENV);
  const table = config.safety.table;
  // The store ids the config's keys get at start, by the keys' hashes.
  const ids = new Map([
    [hashKey(ENV.KEY_CI), 'id-ci'],
    [hashKey(ENV.KEY_WEB), 'id-web'],
  ]);
  const byKeyId = keyPoliciesById(table, (hash) => ids.get(hash));

  it('the most specific wins: key, then account, then model, then the default', () => {
    expect(resolvePolicy(table, byKeyId, 'm/strict', 'acme', 'id-ci').name).toBe('off');
    expect(resolvePolicy(table, byKeyId, 'm/strict', 'acme', 'id-web').name).toBe('annotate');
    expect(resolvePolicy(table, byKeyId, 'm/strict', 'other', 'any').name).toBe('strict');
    expect(resolvePolicy(table, byKeyId, 'm/plain', 'other', 'any').name).toBe('redact');
  });

  it('a key policy belongs to the key, not to its name: another key named like it gets the account policy', () => {
    expect([...byKeyId]).toEqual([['id-ci', 'off']]);
    expect(resolvePolicy(table, byKeyId, 'm/strict', 'acme', 'ci').name).toBe('annotate');
  });

  it('a named policy fills what it leaves out from the defaults', () => {
    const strict = resolvePolicy(table, byKeyId, 'm/strict', 'other', 'any');
    expect(strict).toMatchObject({
      mode: 'block',
      classifier: 'offline',
      redact: [],
      thresholds: { hate: 'medium', sexual: 'medium', violence: 'low', self_harm: 'medium' },
      filter: { jailbreak: true, profanity: true, pii: false },
    });
  });

  it('off means nothing runs: activeSafety is undefined', () => {
    const safety = { table, byKeyId, classifiers: buildClassifiers([]), streamWindowChars: 400 };
    expect(
      activeSafety(safety, 'm/strict', { account: { name: 'acme' }, key: { id: 'id-ci' } }),
    ).toBeUndefined();
    expect(activeSafety(safety, 'm/strict', { account: { name: 'x' }, key: { id: 'y' } })?.policy.name).toBe(
      'strict',
    );
  });

  it('without a safety section every model is off', () => {
    const text = CONFIG('')
      .replace('    safety: strict\n', '')
      .replace('    safety: annotate\n', '')
      .replace(', safety: off', '');
    const plain = parseConfig(text, 'test.yaml', ENV).safety;
    expect(plain.table.byModel.size + plain.table.byAccount.size + plain.table.byKeyHash.size).toBe(0);
    expect(plain.table.defaultPolicy).toBe('off');
    expect(plain.streamWindowChars).toBe(400);
  });

  it.each([
    [
      'an unknown policy on a model',
      CONFIG('').replace('safety: strict', 'safety: nope'),
      /\/models\/1\/safety: unknown safety policy "nope"/,
    ],
    [
      'an unknown default',
      CONFIG('safety: { default: nope }'),
      /\/safety\/default: unknown safety policy "nope"/,
    ],
    [
      'an unknown classifier',
      CONFIG('safety: { policies: { strict: { mode: block, classifier: mod } } }'),
      /unknown classifier "mod"/,
    ],
    [
      'a preset redefined',
      CONFIG('safety: { policies: { strict: { mode: block }, block: { mode: off } } }'),
      /"block" is a preset/,
    ],
    ['a bad mode', CONFIG('safety: { policies: { strict: { mode: loud } } }'), /mode/],
    [
      'a window over 1000',
      CONFIG('safety: { stream_window_chars: 5000, policies: { strict: { mode: block } } }'),
      /stream_window_chars/,
    ],
    [
      'a classifier key not set',
      CONFIG(
        'safety: { classifiers: { mod: { kind: openai_moderations, url: "http://x", api_key_env: NOPE } }, policies: { strict: { mode: block, classifier: mod } } }',
      ),
      /NOPE is not set/,
    ],
  ])('refused at start: %s', (_name, text, message) => {
    expect(() => parseConfig(text, 'test.yaml', ENV)).toThrow(ConfigError);
    expect(() => parseConfig(text, 'test.yaml', ENV)).toThrow(message);
  });
});

describe('prompt texts', () => {
  it('chat: user, system and developer text is the prompt; tool output is a document; assistant turns are skipped', () => {
    expect(
      chatPromptParts([
        { role: 'system', content: 'Be brief.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'one' },
            { type: 'image_url', image_url: { url: 'data:' } },
            { type: 'text', text: 'two' },
          ],
        },
        { role: 'assistant', content: 'I said this' },
        { role: 'tool', tool_call_id: 'c', content: 'tool says' },
        { role: 'developer', content: '' },
      ]),
    ).toEqual([
      { text: 'Be brief.', source: 'prompt' },
      { text: 'one\ntwo', source: 'prompt' },
      { text: 'tool says', source: 'document' },
    ]);
  });

  it('responses: instructions, input text and function_call_output', () => {
    expect(responsesPromptParts('Be kind.', 'hello')).toEqual([
      { text: 'Be kind.', source: 'prompt' },
      { text: 'hello', source: 'prompt' },
    ]);
    expect(
      responsesPromptParts(undefined, [
        { role: 'user', content: [{ type: 'input_text', text: 'q' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'a' }] },
        { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c', output: 'result' },
      ]),
    ).toEqual([
      { text: 'q', source: 'prompt' },
      { text: 'result', source: 'document' },
    ]);
  });
});

describe('maskText', () => {
  it('masks the listed kinds, once per overlap, and counts them', () => {
    const text = 'mail a@b.io or call +1 415 555 0100, key sk-abc';
    const spans = [
      { kind: 'email', start: 5, end: 11 },
      { kind: 'phone', start: 20, end: 35 },
      { kind: 'secret', start: 41, end: 47 },
      { kind: 'phone', start: 22, end: 30 },
    ] as const;
    expect(maskText(text, spans, new Set(['email', 'phone']))).toEqual({
      text: 'mail [EMAIL] or call [PHONE], key sk-abc',
      masked: 2,
    });
    expect(maskText(text, spans, new Set())).toEqual({ text, masked: 0 });
  });
});

describe('TextWindows', () => {
  it('a window is due past its size at the end of a sentence; each carries its offsets and the tail before it', () => {
    const w = new TextWindows(10);
    expect(w.add('hello ')).toBe(false);
    // Past the size but mid-sentence: not yet (a threat is not judged, nor released, by halves).
    expect(w.add('world, and')).toBe(false);
    expect(w.add(' more.')).toBe(true);
    expect(w.take()).toEqual({ text: 'hello world, and more.', start: 0, end: 22 });
    expect(w.add(`${'x'.repeat(70)}!\n`)).toBe(true);
    const second = w.take();
    expect(second.start).toBe(22);
    expect(second.end).toBe(94);
    expect(second.text).toBe(`hello world, and more.${'x'.repeat(70)}!\n`);
    w.add('end');
    const last = w.take();
    expect(last.text).toBe(`${'x'.repeat(62)}!\nend`);
    expect(w.checkedUpTo).toBe(97);
  });

  it('a sentence that does not end is cut at MAX_WINDOW characters', () => {
    const w = new TextWindows(10);
    let due = false;
    let added = 0;
    while (!due) {
      due = w.add('word ');
      added += 5;
    }
    expect(added).toBe(MAX_WINDOW);
    expect(w.take().end).toBe(MAX_WINDOW);
  });
});

function stub(answer: (text: string) => Findings | Promise<Findings>): TextClassifier {
  return { name: 'stub', classify: (text) => answer(text) };
}

describe('checks and verdicts', () => {
  const active = (
    policy: SafetyPolicy,
    classifier: TextClassifier,
    onFailure: 'open' | 'closed' = 'open',
  ): ActiveSafety => ({
    policy,
    classifier,
    onFailure,
  });

  it('a flagged prompt under block is blocked: 400 content_filter with the results in innererror', async () => {
    const check = await checkPrompt(
      active(
        block,
        stub(() => ({ harm: { violence: 'high' }, detected: { jailbreak: false } })),
      ),
      [{ text: 'x', source: 'prompt' }],
    );
    expect(check.blocked).toBe(true);
    const err = blockedPromptError(check);
    expect(err).toBeInstanceOf(GantryError);
    expect(err.errorId).toBe('CONTENT_POLICY_VIOLATION');
    expect(inferenceEnvelope(err)).toMatchObject({
      error: {
        type: 'invalid_request_error',
        code: 'content_filter',
        param: 'prompt',
        http_status: 400,
        innererror: {
          code: 'ResponsibleAIPolicyViolation',
          content_filter_result: {
            violence: { filtered: true, severity: 'high' },
            jailbreak: { filtered: false, detected: false },
          },
        },
      },
    });
    expect(promptFilterResults(check)).toEqual([{ prompt_index: 0, content_filter_results: check.results }]);
  });

  it('a prompt attack is a SECURITY_VIOLATION; the same under annotate only flags', async () => {
    const attack = stub(() => ({ harm: {}, detected: { jailbreak: true } }));
    const blocked = await checkPrompt(active(block, attack), [{ text: 'x', source: 'prompt' }]);
    expect(blockedPromptError(blocked).errorId).toBe('SECURITY_VIOLATION');
    const annotated = await checkPrompt(active(annotate, attack), [{ text: 'x', source: 'prompt' }]);
    expect(annotated).toMatchObject({
      blocked: false,
      flagged: ['jailbreak'],
      results: { jailbreak: { filtered: false, detected: true } },
    });
  });

  it('a classifier that fails: open gives the error in the results, closed refuses with 503', async () => {
    const down = stub(async () => {
      throw new ClassifierUnavailable('stub', 'stub: timed out after 5 ms');
    });
    const open = await checkCompletion(active(block, down, 'open'), 'text');
    expect(open).toEqual({
      results: {
        error: {
          code: 'content_filter_error',
          message: 'The contents are not filtered: stub: timed out after 5 ms',
        },
      },
      flagged: [],
      blocked: false,
      findings: undefined,
    });
    const closed = checkCompletion(active(block, down, 'closed'), 'text');
    await expect(closed).rejects.toMatchObject({
      errorId: 'SERVICE_UNAVAILABLE',
      status: 503,
      code: 'content_filter_unavailable',
    });
  });

  it('any other error of a classifier is not swallowed', async () => {
    const broken = stub(() => {
      throw new TypeError('bug');
    });
    await expect(checkPrompt(active(annotate, broken), [{ text: 'x', source: 'prompt' }])).rejects.toThrow(
      TypeError,
    );
  });

  it('empty texts are not classified', async () => {
    let calls = 0;
    const counting = stub(() => {
      calls++;
      return { harm: {}, detected: {} };
    });
    await checkPrompt(active(annotate, counting), [
      { text: '', source: 'prompt' },
      { text: 'a', source: 'document' },
    ]);
    expect(calls).toBe(1);
  });

  it('a remote classifier is asked for every part at once, each with the request signal', async () => {
    const asked: Array<{ text: string; signal: AbortSignal | undefined; answer: (f: Findings) => void }> = [];
    const remote: TextClassifier = {
      name: 'remote',
      classify: (text, _source, signal) =>
        new Promise<Findings>((resolve) => asked.push({ text, signal, answer: resolve })),
    };
    const controller = new AbortController();
    const pending = checkPrompt(
      active(annotate, remote),
      [
        { text: 'one', source: 'prompt' },
        { text: 'two', source: 'prompt' },
        { text: 'three', source: 'document' },
      ],
      controller.signal,
    );
    // All three were sent before any answered: one round trip of latency, not three.
    expect(asked.map((a) => a.text)).toEqual(['one', 'two', 'three']);
    expect(asked.every((a) => a.signal === controller.signal)).toBe(true);
    asked[2]?.answer({ harm: { violence: 'medium' }, detected: { indirect_attack: true } });
    asked[0]?.answer({ harm: { violence: 'low', hate: 'high' }, detected: {} });
    asked[1]?.answer({ harm: { violence: 'safe' }, detected: { jailbreak: false } });
    const check = await pending;
    expect(check.findings).toEqual({
      harm: { violence: 'medium', hate: 'high' },
      detected: { indirect_attack: true, jailbreak: false },
    });
  });

  it('a part that fails fails the prompt check under the policy, whichever part it is', async () => {
    let n = 0;
    const flaky = stub(async () => {
      n++;
      if (n === 2) throw new ClassifierUnavailable('stub', 'stub: connection refused');
      return { harm: {}, detected: {} };
    });
    const parts = [
      { text: 'a', source: 'prompt' as const },
      { text: 'b', source: 'prompt' as const },
      { text: 'c', source: 'prompt' as const },
    ];
    await expect(checkPrompt(active(annotate, flaky, 'closed'), parts)).rejects.toMatchObject({
      status: 503,
      code: 'content_filter_unavailable',
    });
    n = 0;
    const open = await checkPrompt(active(annotate, flaky, 'open'), parts);
    expect(open.findings).toBeUndefined();
    expect(open.results).toEqual({
      error: {
        code: 'content_filter_error',
        message: 'The contents are not filtered: stub: connection refused',
      },
    });
  });

  it("known findings (personal data masked before the check) are reported with the classifier's", async () => {
    const check = await checkPrompt(
      active(
        annotate,
        stub(() => ({ harm: { violence: 'safe' }, detected: {} })),
      ),
      [{ text: 'x', source: 'prompt' }],
      undefined,
      { harm: {}, detected: { pii: true } },
    );
    expect(check.results).toMatchObject({ pii: { filtered: false, detected: true } });
  });
});
