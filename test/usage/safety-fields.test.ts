import { describe, expect, it } from 'vitest';
import { newSafetyOutcome } from '../../src/safety/engine.js';
import { PRESET_POLICIES, type SafetyPolicy } from '../../src/safety/policy.js';
import { predictionSafetyFields, safetyUsageFields } from '../../src/usage/safety-fields.js';

const POLICIES = new Map<string, SafetyPolicy>(Object.entries(PRESET_POLICIES));

describe("a request's safety outcome as usage record fields", () => {
  it('off: no flags, no action', () => {
    expect(safetyUsageFields(undefined)).toEqual({ safety_flags: [], safety_action: null });
  });

  it('checked: the flags sorted; blocked wins over redacted, redacted over annotated', () => {
    const outcome = newSafetyOutcome();
    expect(safetyUsageFields(outcome)).toEqual({ safety_flags: [], safety_action: 'annotated' });
    outcome.flagged.add('violence');
    outcome.flagged.add('hate');
    outcome.redacted = 2;
    expect(safetyUsageFields(outcome)).toEqual({
      safety_flags: ['hate', 'violence'],
      safety_action: 'redacted',
    });
    outcome.blocked = true;
    expect(safetyUsageFields(outcome).safety_action).toBe('blocked');
  });
});

describe("a prediction's kept results as usage record fields", () => {
  const results = {
    hate: { filtered: false, severity: 'safe' },
    violence: { filtered: false, severity: 'medium' },
    jailbreak: { filtered: false, detected: false },
    pii: { filtered: false, detected: true },
  };

  it('unchecked: no flags, no action', () => {
    expect(predictionSafetyFields(undefined, POLICIES)).toEqual({ safety_flags: [], safety_action: null });
  });

  it("flags what the policy's thresholds put over, as the check did", () => {
    expect(
      predictionSafetyFields({ policy: 'annotate', prompt: { content_filter_results: results } }, POLICIES),
    ).toEqual({
      safety_flags: ['violence'],
      safety_action: 'annotated',
    });
  });

  it('a masked prompt is redacted; a filtered output is blocked and flagged', () => {
    const prompt = { content_filter_results: results, redacted: 1 };
    expect(predictionSafetyFields({ policy: 'redact', prompt }, POLICIES).safety_action).toBe('redacted');
    const output = { content_filter_results: { sexual: { filtered: true, severity: 'high' } } };
    expect(
      predictionSafetyFields({ policy: 'block', prompt: { content_filter_results: {} }, output }, POLICIES),
    ).toEqual({
      safety_flags: ['sexual'],
      safety_action: 'blocked',
    });
  });

  it('a policy gone from the config counts only what was filtered; an error result counts nothing', () => {
    const gone = { policy: 'removed', prompt: { content_filter_results: results } };
    expect(predictionSafetyFields(gone, POLICIES)).toEqual({ safety_flags: [], safety_action: 'annotated' });
    const failed = {
      policy: 'annotate',
      prompt: { content_filter_results: { error: { code: 'x', message: 'y' } } },
    };
    expect(predictionSafetyFields(failed, POLICIES)).toEqual({
      safety_flags: [],
      safety_action: 'annotated',
    });
  });
});
