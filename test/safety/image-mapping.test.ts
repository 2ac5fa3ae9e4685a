/**
 * The mapping of the image model's class probabilities onto Azure's `sexual` severities, tested with
 * probability tables: the repository holds no explicit image, so the flagged severities are reached
 * here, from what the model would answer for one (README, "Image outputs").
 */
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../src/config/load.js';
import { evaluate } from '../../src/safety/azure.js';
import { DEFAULT_CUTOFFS, type ImageProbabilities, sexualSeverity } from '../../src/safety/image/mapping.js';
import { PRESET_POLICIES } from '../../src/safety/policy.js';

function p(values: Partial<ImageProbabilities>): ImageProbabilities {
  return { Drawing: 0, Hentai: 0, Neutral: 0, Porn: 0, Sexy: 0, ...values };
}

describe('sexualSeverity', () => {
  it.each([
    // What the model answers for a flat colour (measured): mostly Drawing.
    ['a flat colour', p({ Drawing: 0.91, Neutral: 0.065, Hentai: 0.019, Porn: 0.004, Sexy: 0.001 }), 'safe'],
    ['a neutral photograph', p({ Neutral: 0.97, Sexy: 0.02, Porn: 0.01 }), 'safe'],
    ['a safe drawing', p({ Drawing: 0.85, Hentai: 0.15 }), 'safe'],
    ['swimwear (suggestive)', p({ Sexy: 0.7, Neutral: 0.25, Porn: 0.05 }), 'low'],
    ['suggestive by the sum', p({ Sexy: 0.35, Porn: 0.15, Neutral: 0.5 }), 'low'],
    ['a hint of explicit', p({ Porn: 0.2, Neutral: 0.8 }), 'low'],
    ['more likely explicit than not', p({ Porn: 0.3, Hentai: 0.2, Sexy: 0.5 }), 'medium'],
    ['explicit drawing', p({ Hentai: 0.8, Drawing: 0.2 }), 'medium'],
    ['explicit, sure', p({ Porn: 0.9, Sexy: 0.1 }), 'high'],
    ['explicit across both explicit classes', p({ Porn: 0.5, Hentai: 0.36, Sexy: 0.14 }), 'high'],
  ] as const)('%s → %s', (_name, probabilities, severity) => {
    expect(sexualSeverity(probabilities)).toBe(severity);
  });

  it('has its cut-offs inclusive', () => {
    expect(sexualSeverity(p({ Porn: DEFAULT_CUTOFFS.high, Neutral: 1 - DEFAULT_CUTOFFS.high }))).toBe('high');
    expect(sexualSeverity(p({ Porn: DEFAULT_CUTOFFS.medium, Neutral: 0.5 }))).toBe('medium');
    expect(sexualSeverity(p({ Porn: 0.49, Neutral: 0.51 }))).toBe('low');
    expect(sexualSeverity(p({ Porn: 0.19, Neutral: 0.81 }))).toBe('safe');
  });

  it('under the block preset, flags and filters medium and high, only reports low', () => {
    const block = PRESET_POLICIES.block;
    if (!block) throw new Error('no block preset');
    const at = (probabilities: ImageProbabilities) =>
      evaluate({ harm: { sexual: sexualSeverity(probabilities) }, detected: {} }, block, 'completion');
    expect(at(p({ Porn: 0.9, Sexy: 0.1 }))).toEqual({
      results: { sexual: { filtered: true, severity: 'high' } },
      flagged: ['sexual'],
    });
    expect(at(p({ Sexy: 0.7, Neutral: 0.3 }))).toEqual({
      results: { sexual: { filtered: false, severity: 'low' } },
      flagged: [],
    });
  });
});

describe("safety.image: the operator's cut-offs", () => {
  const config = (image: string) => `
providers:
  local: { kind: local }
models:
  - namespace: m/image
    name: Image
    type: image
    serves: [predictions]
    routes: [{ provider: local, model: local-image }]
safety:
  default: annotate
${image}`;

  it('are the defaults when the section is absent', () => {
    expect(parseConfig(config(''), 'test.yaml', {}).safety.imageCutoffs).toEqual(DEFAULT_CUTOFFS);
  });

  it('are read at start, each key over its default, and move the severities', () => {
    const cutoffs = parseConfig(
      config('  image: { explicit_high: 0.95, explicit_medium: 0.7, suggestive_low: 0.8 }'),
      'test.yaml',
      {},
    ).safety.imageCutoffs;
    expect(cutoffs).toEqual({ high: 0.95, medium: 0.7, low: DEFAULT_CUTOFFS.low, suggestive: 0.8 });
    // medium and high by default, one step lower with these cut-offs.
    expect(sexualSeverity(p({ Porn: 0.6, Neutral: 0.4 }), cutoffs)).toBe('low');
    expect(sexualSeverity(p({ Porn: 0.9, Neutral: 0.1 }), cutoffs)).toBe('medium');
    // Suggestive at 0.7 is low by default, safe under suggestive_low 0.8.
    expect(sexualSeverity(p({ Sexy: 0.7, Neutral: 0.3 }), cutoffs)).toBe('safe');
  });

  it.each([
    ['a probability over 1', '  image: { explicit_high: 1.5 }', /explicit_high/],
    ['a negative probability', '  image: { suggestive_low: -0.1 }', /suggestive_low/],
    ['an unknown key', '  image: { porn: 0.5 }', /porn|additional/],
    [
      'explicit_medium over explicit_high',
      '  image: { explicit_medium: 0.9, explicit_high: 0.8 }',
      /\/safety\/image/,
    ],
    ['explicit_low over explicit_medium (its default)', '  image: { explicit_low: 0.6 }', /\/safety\/image/],
  ])('refuses %s', (_name, image, message) => {
    expect(() => parseConfig(config(image), 'test.yaml', {})).toThrow(ConfigError);
    expect(() => parseConfig(config(image), 'test.yaml', {})).toThrow(message);
  });
});
