import { describe, expect, it } from 'vitest';
import {
  compilePricing,
  computeCost,
  priceUsage,
  roundThroughDecimal,
  roundTo,
  toCredits,
  type Usage,
  validatePricing,
} from '../../src/metering/pricing.js';

// Every expected value below is worked out by hand in the test, never taken from the code under test.

const M = 1_000_000;

function cost(pricing: Record<string, unknown>, usage: Usage, modelType?: string): number {
  return computeCost(pricing, usage, modelType ? { modelType } : {}).cost;
}

describe('million_token', () => {
  it('applies the amount to input + output tokens when no token_type criterias are given', () => {
    const pricing = { amount: 0.6, currency: 'USD', unit: 'million_token' };
    // (1,000 + 500) tokens × $0.60 / 1M = $0.0009
    expect(cost(pricing, { inputTokens: 1000, outputTokens: 500 })).toBeCloseTo((1500 * 0.6) / M, 12);
  });

  it('does not add cached or reasoning tokens on top of the totals', () => {
    const pricing = { amount: 2, currency: 'USD', unit: 'million_token' };
    const usage = { inputTokens: 1000, cachedInputTokens: 600, outputTokens: 400, reasoningTokens: 300 };
    // Subsets: still 1,000 + 400 = 1,400 tokens × $2 / 1M = $0.0028 (not 2,300 tokens)
    expect(cost(pricing, usage)).toBeCloseTo((1400 * 2) / M, 12);
  });

  it('splits the price by token_type criterias: uncached input, cached input, output', () => {
    const pricing = {
      amount: 0.15,
      currency: 'USD',
      unit: 'million_token',
      criterias: [
        {
          field: 'token_type',
          description: 'Input',
          operator: '==',
          value: 'input',
          billable_price: 0.15,
          unit: 'million_token',
        },
        {
          field: 'token_type',
          description: 'Cached',
          operator: '==',
          value: 'cached_input',
          billable_price: 0.075,
          unit: 'million_token',
        },
        {
          field: 'token_type',
          description: 'Output',
          operator: '==',
          value: 'output',
          billable_price: 0.6,
          unit: 'million_token',
        },
      ],
    };
    const usage = {
      inputTokens: 10_000,
      cachedInputTokens: 4_000,
      outputTokens: 2_000,
      reasoningTokens: 500,
    };
    // uncached 6,000 × 0.15/1M = 0.0009; cached 4,000 × 0.075/1M = 0.0003; output 2,000 × 0.6/1M = 0.0012
    // (reasoning is part of output and has no own rate) → 0.0024
    const result = computeCost(pricing, usage);
    expect(result.cost).toBeCloseTo(0.0009 + 0.0003 + 0.0012, 12);
    expect(result.currency).toBe('USD');
    expect(result.lines).toEqual([
      { item: 'input_tokens', quantity: 6000, rate: 0.15, per: M, cost: 0.0009, source: 'criterias[0]' },
      {
        item: 'cached_input_tokens',
        quantity: 4000,
        rate: 0.075,
        per: M,
        cost: 0.0003,
        source: 'criterias[1]',
      },
      { item: 'output_tokens', quantity: 2000, rate: 0.6, per: M, cost: 0.0012, source: 'criterias[2]' },
    ]);
  });

  it('prices cached input at the input rate when no cached price is given', () => {
    const pricing = {
      amount: 2.5,
      currency: 'USD',
      unit: 'million_token',
      criterias: [
        { field: 'token_type', operator: '==', value: 'input', billable_price: 2.5, unit: 'million_token' },
        { field: 'token_type', operator: '==', value: 'output', billable_price: 10, unit: 'million_token' },
      ],
    };
    // 600 × 2.5/1M + 400 × 2.5/1M + 100 × 10/1M = 0.0015 + 0.001 + 0.001 = 0.0035
    expect(cost(pricing, { inputTokens: 1000, cachedInputTokens: 400, outputTokens: 100 })).toBeCloseTo(
      0.0015 + 0.001 + 0.001,
      12,
    );
  });

  it('prices reasoning tokens at their own rate when one is given, and the rest of output as output', () => {
    const pricing = {
      amount: 1,
      currency: 'USD',
      unit: 'million_token',
      criterias: [
        { field: 'token_type', operator: '==', value: 'output', billable_price: 4, unit: 'million_token' },
        { field: 'token_type', operator: '==', value: 'reasoning', billable_price: 8, unit: 'million_token' },
      ],
    };
    // input 100 × 1/1M (base amount) = 0.0001; output 700 × 4/1M = 0.0028; reasoning 300 × 8/1M = 0.0024
    expect(cost(pricing, { inputTokens: 100, outputTokens: 1000, reasoningTokens: 300 })).toBeCloseTo(
      0.0001 + 0.0028 + 0.0024,
      12,
    );
  });

  it('falls back to the base amount for a token type without a criterion', () => {
    const pricing = {
      amount: 3,
      currency: 'USD',
      unit: 'million_token',
      criterias: [
        { field: 'token_type', operator: '==', value: 'input', billable_price: 1, unit: 'million_token' },
      ],
    };
    // input 2,000 × 1/1M = 0.002; output 1,000 × 3/1M (amount) = 0.003
    expect(cost(pricing, { inputTokens: 2000, outputTokens: 1000 })).toBeCloseTo(0.002 + 0.003, 12);
  });

  it('clamps subsets larger than their totals', () => {
    const pricing = {
      amount: 0,
      currency: 'USD',
      unit: 'million_token',
      criterias: [
        { field: 'token_type', operator: '==', value: 'input', billable_price: 1, unit: 'million_token' },
        {
          field: 'token_type',
          operator: '==',
          value: 'cached_input',
          billable_price: 0.5,
          unit: 'million_token',
        },
      ],
    };
    // cached 900 reported for 500 input: all 500 are cached → 500 × 0.5/1M = 0.00025
    expect(cost(pricing, { inputTokens: 500, cachedInputTokens: 900 })).toBeCloseTo((500 * 0.5) / M, 12);
  });

  it('supports per-token prices (unit token), also in a criterion next to per-million ones', () => {
    // 150 tokens × $0.000002 = $0.0003
    expect(
      cost({ amount: 0.000002, currency: 'USD', unit: 'token' }, { inputTokens: 100, outputTokens: 50 }),
    ).toBeCloseTo(150 * 0.000002, 12);
    const mixed = {
      amount: 1,
      currency: 'USD',
      unit: 'million_token',
      criterias: [
        { field: 'token_type', operator: '==', value: 'output', billable_price: 0.00001, unit: 'token' },
      ],
    };
    // input 1,000 × 1/1M = 0.001; output 10 × 0.00001 = 0.0001
    expect(cost(mixed, { inputTokens: 1000, outputTokens: 10 })).toBeCloseTo(0.001 + 0.0001, 12);
  });

  it('lets one token_type criterion cover several types with in', () => {
    const pricing = {
      amount: 9,
      currency: 'USD',
      unit: 'million_token',
      criterias: [
        {
          field: 'token_type',
          operator: 'in',
          value: ['input', 'output'],
          billable_price: 2,
          unit: 'million_token',
        },
      ],
    };
    // (1,000 + 1,000) × 2/1M = 0.004
    expect(cost(pricing, { inputTokens: 1000, outputTokens: 1000 })).toBeCloseTo(0.004, 12);
  });
});

describe('media units', () => {
  it('image: per image', () => {
    const pricing = { amount: 0.04, currency: 'USD', unit: 'image' };
    expect(cost(pricing, { images: 3 })).toBeCloseTo(3 * 0.04, 12);
    // No images made (e.g. nothing produced): nothing billed.
    expect(cost(pricing, {})).toBe(0);
  });

  it('rounds float noise away: 3 × $0.10 is exactly 0.3', () => {
    // 3 * 0.1 === 0.30000000000000004 in binary floating point
    expect(cost({ amount: 0.1, currency: 'USD', unit: 'image' }, { images: 3 })).toBe(0.3);
  });

  it('image_megapixel: per output megapixel', () => {
    const pricing = { amount: 0.015, currency: 'USD', unit: 'image_megapixel' };
    // 2.5 MP × $0.015 = $0.0375 (input megapixels are not charged by the plain unit)
    expect(cost(pricing, { megapixels: { input: 4, output: 2.5 } })).toBeCloseTo(2.5 * 0.015, 12);
  });

  it('second: per second, video billed at least 5 s', () => {
    const pricing = { amount: 0.1, currency: 'USD', unit: 'second' };
    expect(cost(pricing, { seconds: 3 })).toBeCloseTo(3 * 0.1, 12); // audio etc.: no minimum
    expect(cost(pricing, { seconds: 3 }, 'video')).toBeCloseTo(5 * 0.1, 12); // 3 s billed as 5
    expect(cost(pricing, { seconds: 7 }, 'video')).toBeCloseTo(7 * 0.1, 12); // 7 s billed as 7
    expect(cost(pricing, { seconds: 5 }, 'video')).toBeCloseTo(5 * 0.1, 12);
  });

  it('video_second applies the minimum without a model type', () => {
    expect(cost({ amount: 0.2, currency: 'USD', unit: 'video_second' }, { seconds: 2 })).toBeCloseTo(
      5 * 0.2,
      12,
    );
  });

  it('takes seconds from params.seconds or params.duration when usage has none', () => {
    const pricing = { amount: 0.1, currency: 'USD', unit: 'second' };
    expect(cost(pricing, { params: { duration: '8' } }, 'video')).toBeCloseTo(8 * 0.1, 12);
    expect(cost(pricing, { params: { seconds: 6 } }, 'video')).toBeCloseTo(6 * 0.1, 12);
    // usage wins over params
    expect(cost(pricing, { seconds: 9, params: { duration: 6 } }, 'video')).toBeCloseTo(9 * 0.1, 12);
  });

  it('minute: per 60 seconds', () => {
    // 90 s = 1.5 min × $0.006 = $0.009
    expect(cost({ amount: 0.006, currency: 'USD', unit: 'minute' }, { seconds: 90 })).toBeCloseTo(
      1.5 * 0.006,
      12,
    );
  });

  it('5-second chunks: per started chunk, video minimum first', () => {
    const pricing = { amount: 0.25, currency: 'USD', unit: '5 seconds' };
    expect(cost(pricing, { seconds: 3 }, 'video')).toBeCloseTo(1 * 0.25, 12); // 3 → 5 s → 1 chunk
    expect(cost(pricing, { seconds: 7 }, 'video')).toBeCloseTo(2 * 0.25, 12); // ceil(7/5) = 2
    expect(cost(pricing, { seconds: 10 }, 'video')).toBeCloseTo(2 * 0.25, 12); // ceil(10/5) = 2
    expect(cost(pricing, { seconds: 11 }, 'video')).toBeCloseTo(3 * 0.25, 12); // ceil(11/5) = 3
    expect(cost({ ...pricing, unit: '5-second chunk' }, { seconds: 12 })).toBeCloseTo(3 * 0.25, 12);
    // float noise does not start a new chunk: 0.1 × 3 × 50 = 15.000000000000002 s is 3 chunks
    expect(cost(pricing, { seconds: 0.1 * 3 * 50 })).toBeCloseTo(3 * 0.25, 12);
  });

  it('prediction: flat per prediction', () => {
    const pricing = { amount: 0.003, currency: 'USD', unit: 'prediction' };
    expect(cost(pricing, {})).toBeCloseTo(0.003, 12);
    expect(cost(pricing, { predictions: 2 })).toBeCloseTo(2 * 0.003, 12);
  });

  it('gpu_second and computing_second: per second of compute, in any spelling', () => {
    // 12.5 s × $0.000725 = $0.0090625
    const expected = 12.5 * 0.000725;
    for (const unit of ['gpu_second', 'GPU-second', 'computing_second', 'computing-second']) {
      expect(
        cost({ amount: 0.000725, currency: 'USD', unit }, { gpuSeconds: 12.5, seconds: 99 }),
      ).toBeCloseTo(expected, 12);
    }
  });
});

describe('criterias on request params', () => {
  const base = { amount: 0.1, currency: 'USD', unit: 'second' };
  const withRule = (field: string, operator: string, value: unknown) => ({
    ...base,
    criterias: [{ field, description: 'rule', operator, value, billable_price: 0.3, unit: 'second' }],
  });
  // 10 s video: $0.30/s when the rule matches (3.0), else the base $0.10/s (1.0).
  const matched = 10 * 0.3;
  const unmatched = 10 * 0.1;

  it.each([
    ['==', 'resolution', '1080p', '1080p', matched],
    ['== (case, spacing)', 'resolution', '1080p', ' 1080P ', matched],
    ['==', 'resolution', '1080p', '720p', unmatched],
    ['== (boolean)', 'generate_audio', true, true, matched],
    ['== (boolean as string)', 'generate_audio', true, 'true', matched],
    ['== (boolean)', 'generate_audio', true, false, unmatched],
    ['== (number as string)', 'duration', 10, '10', matched],
    ['!=', 'resolution', '480p', '1080p', matched],
    ['!=', 'resolution', '480p', '480p', unmatched],
    ['>', 'duration', 5, 10, matched],
    ['>', 'duration', 10, 10, unmatched],
    ['>=', 'duration', 10, 10, matched],
    ['>=', 'duration', 11, 10, unmatched],
    ['<', 'duration', 11, 10, matched],
    ['<', 'duration', 10, 10, unmatched],
    ['<=', 'duration', 10, 10, matched],
    ['<=', 'duration', 9, 10, unmatched],
    ['> (numeric string param)', 'duration', 5, '10', matched],
    ['> (non-numeric param)', 'duration', 5, 'long', unmatched],
    ['in', 'aspect_ratio', ['16:9', '9:16'], '9:16', matched],
    ['in', 'aspect_ratio', ['16:9', '9:16'], '1:1', unmatched],
    ['not_in', 'aspect_ratio', ['16:9', '9:16'], '1:1', matched],
    ['not_in', 'aspect_ratio', ['16:9', '9:16'], '16:9', unmatched],
  ])('%s: %s %j vs param %j', (label, field, value, param, expected) => {
    const operator = label.split(' ')[0] as string;
    expect(cost(withRule(field, operator, value), { seconds: 10, params: { [field]: param } })).toBeCloseTo(
      expected,
      12,
    );
  });

  it('accepts operator aliases (equals, gt, not in)', () => {
    expect(
      cost(withRule('resolution', 'equals', '1080p'), { seconds: 10, params: { resolution: '1080p' } }),
    ).toBeCloseTo(matched, 12);
    expect(cost(withRule('duration', 'gt', 5), { seconds: 10, params: { duration: 10 } })).toBeCloseTo(
      matched,
      12,
    );
    expect(
      cost(withRule('aspect_ratio', 'not in', ['1:1']), { seconds: 10, params: { aspect_ratio: '4:3' } }),
    ).toBeCloseTo(matched, 12);
  });

  it('never matches a field the request lacks, whatever the operator', () => {
    for (const [op, value] of [
      ['==', 'x'],
      ['!=', 'x'],
      ['not_in', ['x']],
      ['<', 100],
    ] as const) {
      expect(cost(withRule('style', op, value), { seconds: 10, params: {} })).toBeCloseTo(unmatched, 12);
      expect(cost(withRule('style', op, value), { seconds: 10, params: { style: null } })).toBeCloseTo(
        unmatched,
        12,
      );
    }
  });

  it('first match wins and replaces the base price (prices never add up)', () => {
    const pricing = {
      ...base,
      criterias: [
        { field: 'resolution', operator: '==', value: '1080p', billable_price: 0.5, unit: 'second' },
        { field: 'generate_audio', operator: '==', value: true, billable_price: 0.4, unit: 'second' },
      ],
    };
    // both match: the first, $0.50/s × 10 s = $5 (not 0.5 + 0.4, not + base)
    expect(cost(pricing, { seconds: 10, params: { resolution: '1080p', generate_audio: true } })).toBeCloseTo(
      10 * 0.5,
      12,
    );
    // only the second matches: $0.40/s × 10 s = $4
    expect(cost(pricing, { seconds: 10, params: { resolution: '720p', generate_audio: true } })).toBeCloseTo(
      10 * 0.4,
      12,
    );
  });

  it('uses the matched criterion unit, or pricing.unit when it has none', () => {
    const pricing = {
      amount: 0.5,
      currency: 'USD',
      unit: 'prediction',
      criterias: [
        { field: 'resolution', operator: '==', value: '1080p', billable_price: 0.1, unit: 'second' },
        { field: 'resolution', operator: '==', value: '4k', billable_price: 2 },
      ],
    };
    // 1080p: per second, 6 s × $0.10 = $0.60
    expect(cost(pricing, { seconds: 6, params: { resolution: '1080p' } })).toBeCloseTo(6 * 0.1, 12);
    // 4k: no unit → per prediction, 1 × $2
    expect(cost(pricing, { seconds: 6, params: { resolution: '4k' } })).toBeCloseTo(2, 12);
    // neither: base, 1 × $0.50
    expect(cost(pricing, { seconds: 6, params: { resolution: '720p' } })).toBeCloseTo(0.5, 12);
  });

  it('reads usage quantities for fields the params lack (long-context tier)', () => {
    const pricing = {
      amount: 1.25,
      currency: 'USD',
      unit: 'million_token',
      criterias: [
        { field: 'input_tokens', operator: '>', value: 200_000, billable_price: 2.5, unit: 'million_token' },
      ],
    };
    // 100,000 + 1,000 tokens at $1.25/M = 0.12625
    expect(cost(pricing, { inputTokens: 100_000, outputTokens: 1000 })).toBeCloseTo((101_000 * 1.25) / M, 12);
    // 300,000 + 1,000 tokens at $2.50/M = 0.7525
    expect(cost(pricing, { inputTokens: 300_000, outputTokens: 1000 })).toBeCloseTo((301_000 * 2.5) / M, 12);
  });
});

describe('formula', () => {
  it('linear with input and output megapixels: Σ quantity × rate', () => {
    const pricing = {
      amount: 0.03,
      currency: 'USD',
      unit: 'image_megapixel',
      formula: {
        description: 'input and output megapixels',
        type: 'linear',
        variables: { input_rate: 0.01, output_rate: 0.03 },
        terms: [
          { megapixel_type: 'input', quantity_key: 'input_megapixels', rate_key: 'input_rate' },
          { megapixel_type: 'output', quantity_key: 'output_megapixels', rate_key: 'output_rate' },
        ],
        result_key: 'billable_price',
      },
    };
    // 2 MP × 0.01 + 1.5 MP × 0.03 = 0.02 + 0.045 = 0.065 (the amount is display-only)
    const result = computeCost(pricing, { megapixels: { input: 2, output: 1.5 } });
    expect(result.cost).toBeCloseTo(0.02 + 0.045, 12);
    expect(result.lines.map((l) => [l.item, l.quantity, l.rate, l.source])).toEqual([
      ['input_megapixels', 2, 0.01, 'formula.terms[0]'],
      ['output_megapixels', 1.5, 0.03, 'formula.terms[1]'],
    ]);
  });

  it('accepts megapixels_key for the quantity', () => {
    const pricing = {
      amount: 0,
      currency: 'USD',
      unit: 'image_megapixel',
      formula: {
        type: 'linear',
        variables: { out: 0.04 },
        terms: [{ megapixel_type: 'output', megapixels_key: 'output_megapixels', rate_key: 'out' }],
        result_key: 'billable_price',
      },
    };
    // 3 MP × 0.04 = 0.12
    expect(cost(pricing, { megapixels: { output: 3 } })).toBeCloseTo(0.12, 12);
  });

  it('prices token terms per million under million_token, per token under token, or per an explicit per', () => {
    const formula = (extra: Record<string, unknown> = {}) => ({
      type: 'linear',
      variables: { in: 1.25, out: 10 },
      terms: [
        { token_type: 'input', quantity_key: 'input_tokens', rate_key: 'in', ...extra },
        { token_type: 'output', quantity_key: 'output_tokens', rate_key: 'out', ...extra },
      ],
    });
    const usage = { inputTokens: 2000, outputTokens: 1000 };
    // per million: 2,000 × 1.25/1M + 1,000 × 10/1M = 0.0025 + 0.01 = 0.0125
    expect(
      cost({ amount: 0, currency: 'USD', unit: 'million_token', formula: formula() }, usage),
    ).toBeCloseTo(0.0025 + 0.01, 12);
    // per token: 2,000 × 1.25 + 1,000 × 10 = 2,500 + 10,000 = 12,500
    expect(cost({ amount: 0, currency: 'USD', unit: 'token', formula: formula() }, usage)).toBeCloseTo(
      12_500,
      6,
    );
    // per 1,000: 2 × 1.25 + 1 × 10 = 12.5
    expect(
      cost({ amount: 0, currency: 'USD', unit: 'million_token', formula: formula({ per: 1000 }) }, usage),
    ).toBeCloseTo(12.5, 10);
  });

  it('keeps cached input a subset when the formula prices it', () => {
    const pricing = {
      amount: 0,
      currency: 'USD',
      unit: 'million_token',
      formula: {
        type: 'linear',
        variables: { in: 1, cached: 0.1, out: 2 },
        terms: [
          { token_type: 'input', quantity_key: 'input_tokens', rate_key: 'in' },
          { token_type: 'cached_input', quantity_key: 'cached_input_tokens', rate_key: 'cached' },
          { token_type: 'output', quantity_key: 'output_tokens', rate_key: 'out' },
        ],
      },
    };
    // uncached 2,000 × 1/1M + cached 8,000 × 0.1/1M + output 1,000 × 2/1M = 0.002 + 0.0008 + 0.002
    expect(cost(pricing, { inputTokens: 10_000, cachedInputTokens: 8_000, outputTokens: 1000 })).toBeCloseTo(
      0.002 + 0.0008 + 0.002,
      12,
    );
  });

  it('applies the video minimum to a seconds term', () => {
    const pricing = {
      amount: 0,
      currency: 'USD',
      unit: 'second',
      formula: { type: 'linear', variables: { s: 0.2 }, terms: [{ quantity_key: 'seconds', rate_key: 's' }] },
    };
    // 2 s video billed as 5 s × 0.2 = 1.0
    expect(cost(pricing, { seconds: 2 }, 'video')).toBeCloseTo(5 * 0.2, 12);
  });
});

describe('billable and missing pricing', () => {
  it('non-billable models cost 0', () => {
    const pricing = { amount: 5, currency: 'EUR', unit: 'prediction' };
    expect(computeCost(pricing, {}, { billable: false })).toEqual({ cost: 0, currency: 'EUR', lines: [] });
    // billable true (or unset) charges: 1 × €5
    expect(computeCost(pricing, {}, { billable: true }).cost).toBe(5);
  });

  it('a model without pricing is free', () => {
    expect(computeCost(undefined, { inputTokens: 1000 })).toEqual({ cost: 0, currency: 'USD', lines: [] });
  });

  it('the shipped config pricing is valid and free', () => {
    const pricing = { amount: 0, currency: 'USD', unit: 'million_token' };
    expect(validatePricing(pricing)).toBeUndefined();
    expect(cost(pricing, { inputTokens: 1000, outputTokens: 1000 })).toBe(0);
  });

  it('priceUsage reuses a compiled pricing', () => {
    const compiled = compilePricing({ amount: 0.04, currency: 'usd', unit: 'image' });
    // 2 × 0.04 = 0.08, 5 × 0.04 = 0.2; the currency code is upper-cased
    expect(priceUsage(compiled, { images: 2 })).toMatchObject({ cost: 0.08, currency: 'USD' });
    expect(priceUsage(compiled, { images: 5 }).cost).toBeCloseTo(0.2, 12);
  });
});

describe('credits', () => {
  it('converts with the configured rate', () => {
    // $0.0024 × 1,000 credits/USD = 2.4 credits
    expect(toCredits(0.0024, 'USD', 1000)).toBe(2.4);
    expect(toCredits(0.0024, 'usd', { USD: 1000, EUR: 1100 })).toBe(2.4);
    // €0.01 × 1,100 = 11
    expect(toCredits(0.01, 'EUR', { USD: 1000, EUR: 1100 })).toBe(11);
  });

  it('rounds to 6 decimals, half up, without float noise', () => {
    // (0.1 + 0.2) × 1000 = 300.00000000000006 in floats → 300
    expect(toCredits(0.1 + 0.2, 'USD', 1000)).toBe(300);
    // 0.0000012345 × 1000 = 0.0012345 → 0.001235 (half up at the 6th decimal)
    expect(toCredits(0.0000012345, 'USD', 1000)).toBe(0.001235);
    // 0.0000001 × 1000 = 0.0001 (kept), 0.0000000004 × 1000 = 0.0000004 → 0
    expect(toCredits(0.0000001, 'USD', 1000)).toBe(0.0001);
    expect(toCredits(0.0000000004, 'USD', 1000)).toBe(0);
  });

  it('roundTo is exact where multiplying by 10^n is not', () => {
    // 1.0000005 * 1e6 === 1000000.4999999999, so Math.round(x * 1e6) / 1e6 would give 1
    expect(roundTo(1.0000005, 6)).toBe(1.000001);
    expect(roundTo(2.675, 2)).toBe(2.68);
    expect(roundTo(0, 6)).toBe(0);
  });

  it('refuses an unknown currency or a bad rate', () => {
    expect(() => toCredits(1, 'GBP', { USD: 1000 })).toThrow(/GBP/);
    expect(() => toCredits(1, 'USD', 0)).toThrow(/positive/);
    expect(() => toCredits(-1, 'USD', 1000)).toThrow(/non-negative/);
  });
});

describe('validatePricing', () => {
  const ok = { amount: 1, currency: 'USD', unit: 'million_token' };

  it('accepts good pricing objects', () => {
    expect(validatePricing(ok)).toBeUndefined();
    expect(
      validatePricing({
        amount: 0.5,
        currency: 'USD',
        unit: 'second',
        criterias: [
          {
            field: 'resolution',
            description: '1080p',
            operator: '==',
            value: '1080p',
            billable_price: 0.7,
            unit: 'second',
          },
          { field: 'aspect_ratio', operator: 'in', value: ['16:9'], billable_price: 0.6 },
          { field: 'duration', operator: '>=', value: 8, billable_price: 0.4, unit: '5 seconds' },
        ],
      }),
    ).toBeUndefined();
  });

  it.each([
    ['not an object', 'USD', 'pricing must be an object'],
    ['negative amount', { ...ok, amount: -1 }, 'pricing.amount'],
    ['string amount', { ...ok, amount: '1' }, 'pricing.amount'],
    ['missing currency', { amount: 1, unit: 'image' }, 'pricing.currency'],
    ['unknown unit', { ...ok, unit: 'per_vibe' }, 'pricing.unit'],
    ['criterias not an array', { ...ok, criterias: {} }, 'pricing.criterias must be an array'],
    ['criterion not an object', { ...ok, criterias: [1] }, 'pricing.criterias[0] must be an object'],
    [
      'criterion without field',
      { ...ok, criterias: [{ operator: '==', value: 'x', billable_price: 1 }] },
      'pricing.criterias[0].field',
    ],
    [
      'unknown operator',
      { ...ok, criterias: [{ field: 'a', operator: '~=', value: 'x', billable_price: 1 }] },
      'pricing.criterias[0].operator',
    ],
    [
      'in without an array',
      { ...ok, criterias: [{ field: 'a', operator: 'in', value: 'x', billable_price: 1 }] },
      'pricing.criterias[0].value',
    ],
    [
      '> with a word',
      { ...ok, criterias: [{ field: 'a', operator: '>', value: 'big', billable_price: 1 }] },
      'pricing.criterias[0].value',
    ],
    [
      '== with an object',
      { ...ok, criterias: [{ field: 'a', operator: '==', value: { x: 1 }, billable_price: 1 }] },
      'pricing.criterias[0].value',
    ],
    [
      'missing billable_price',
      { ...ok, criterias: [{ field: 'a', operator: '==', value: 'x' }] },
      'pricing.criterias[0].billable_price',
    ],
    [
      'unknown token type',
      { ...ok, criterias: [{ field: 'token_type', operator: '==', value: 'image', billable_price: 1 }] },
      'pricing.criterias[0].value',
    ],
    [
      'token_type priced per image',
      {
        ...ok,
        criterias: [
          { field: 'token_type', operator: '==', value: 'input', billable_price: 1, unit: 'image' },
        ],
      },
      'pricing.criterias[0].unit',
    ],
    [
      'unknown criterion unit',
      { ...ok, criterias: [{ field: 'a', operator: '==', value: 'x', billable_price: 1, unit: 'hour' }] },
      'pricing.criterias[0].unit',
    ],
    [
      'formula not linear',
      { ...ok, formula: { type: 'quadratic', variables: {}, terms: [] } },
      'pricing.formula.type',
    ],
    [
      'formula variable not a number',
      { ...ok, formula: { type: 'linear', variables: { a: 'x' }, terms: [] } },
      'pricing.formula.variables.a',
    ],
    [
      'formula without terms',
      { ...ok, formula: { type: 'linear', variables: {}, terms: [] } },
      'pricing.formula.terms',
    ],
    [
      'unknown quantity key',
      {
        ...ok,
        formula: { type: 'linear', variables: { a: 1 }, terms: [{ quantity_key: 'pixels', rate_key: 'a' }] },
      },
      'pricing.formula.terms[0].quantity_key',
    ],
    [
      'rate_key not in variables',
      {
        ...ok,
        formula: {
          type: 'linear',
          variables: { a: 1 },
          terms: [{ quantity_key: 'input_tokens', rate_key: 'b' }],
        },
      },
      'pricing.formula.terms[0].rate_key',
    ],
    [
      'per of zero',
      {
        ...ok,
        formula: {
          type: 'linear',
          variables: { a: 1 },
          terms: [{ quantity_key: 'input_tokens', rate_key: 'a', per: 0 }],
        },
      },
      'pricing.formula.terms[0].per',
    ],
  ])('rejects %s', (_label, pricing, message) => {
    expect(validatePricing(pricing)).toContain(message);
  });

  it('computeCost throws on a pricing object validatePricing rejects', () => {
    expect(() => computeCost({ amount: 1, currency: 'USD', unit: 'nope' }, {})).toThrow(/pricing.unit/);
  });
});

describe('roundTo fast path', () => {
  it('gives exactly what the decimal route gives, near halves and far from them', () => {
    // Deterministic pseudo-random values: prices, token costs, credit figures and halves of every size.
    let seed = 12345;
    const next = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    const values: number[] = [1.0000005, 2.675, 0.5, -2.5, 1e-12, 123456.78905, 0.1 + 0.2, 9007199254.740992];
    for (let i = 0; i < 20_000; i++) {
      const magnitude = 10 ** Math.floor(next() * 16 - 10);
      values.push(next() * magnitude, -next() * magnitude, Math.round(next() * 1e6) / 1e6 + 5e-7);
      // Exact decimal halves at the rounding digit, the case the decimal route exists for.
      const digits = Math.floor(next() * 10);
      values.push((Math.floor(next() * 1e6) + 0.5) / 10 ** digits);
    }
    let checked = 0;
    for (const value of values) {
      for (const digits of [0, 2, 6, 9, 10]) {
        expect(roundTo(value, digits), `${value} to ${digits}`).toBe(roundThroughDecimal(value, digits));
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(400_000);
  });
});

describe('cache writes (cacheWriteInputTokens)', () => {
  const tokenType = (value: string, price: number) => ({
    field: 'token_type',
    operator: '==',
    value,
    billable_price: price,
    unit: 'million_token',
  });
  const anthropicLike = {
    amount: 0,
    currency: 'USD',
    unit: 'million_token',
    criterias: [
      tokenType('input', 3),
      tokenType('cached_input', 0.3),
      tokenType('cache_write', 3.75),
      tokenType('output', 15),
    ],
  };

  it('prices cache writes at the cache_write rate, apart from reads and plain input', () => {
    const usage = {
      inputTokens: 10_000,
      cachedInputTokens: 6_000,
      cacheWriteInputTokens: 3_000,
      outputTokens: 500,
    };
    // plain 1,000 × 3/1M = 0.003; read 6,000 × 0.3/1M = 0.0018; written 3,000 × 3.75/1M = 0.01125;
    // output 500 × 15/1M = 0.0075
    const out = computeCost(anthropicLike, usage);
    expect(out.cost).toBeCloseTo(0.003 + 0.0018 + 0.01125 + 0.0075, 12);
    expect(out.lines.find((l) => l.item === 'cache_write_tokens')).toEqual({
      item: 'cache_write_tokens',
      quantity: 3000,
      rate: 3.75,
      per: M,
      cost: (3000 * 3.75) / M,
      source: 'criterias[2]',
    });
    expect(out.lines.find((l) => l.item === 'input_tokens')?.quantity).toBe(1000);
  });

  it('prices cache writes at the input rate when the pricing gives no cache_write rate', () => {
    const pricing = { ...anthropicLike, criterias: [tokenType('input', 3), tokenType('output', 15)] };
    // no cached_input or cache_write rate: all 10,000 input tokens at 3/1M = 0.03; output 500 × 15/1M
    const usage = {
      inputTokens: 10_000,
      cachedInputTokens: 6_000,
      cacheWriteInputTokens: 3_000,
      outputTokens: 500,
    };
    expect(cost(pricing, usage)).toBeCloseTo(0.03 + 0.0075, 12);
    // and at the base amount when there is no input rate either
    expect(cost({ amount: 2, currency: 'USD', unit: 'million_token' }, usage)).toBeCloseTo(
      (10_500 * 2) / M,
      12,
    );
  });

  it('clamps cache writes to the input the cache reads leave', () => {
    // 1,000 input, 800 read, 5,000 "written": only 200 can be writes, none plain input
    const out = computeCost(anthropicLike, {
      inputTokens: 1000,
      cachedInputTokens: 800,
      cacheWriteInputTokens: 5000,
    });
    expect(out.cost).toBeCloseTo((800 * 0.3 + 200 * 3.75) / M, 12);
    expect(out.lines.map((l) => [l.item, l.quantity])).toEqual([
      ['cached_input_tokens', 800],
      ['cache_write_tokens', 200],
    ]);
  });

  it('accepts cache_write as a token type and still rejects unknown ones', () => {
    expect(validatePricing(anthropicLike)).toBeUndefined();
    expect(validatePricing({ ...anthropicLike, criterias: [tokenType('cache_creation', 1)] })).toMatch(
      /cache_write/,
    );
  });

  it('keeps cache writes a subset of input in a formula with a cache_write_tokens term', () => {
    const pricing = {
      amount: 0,
      currency: 'USD',
      unit: 'million_token',
      formula: {
        type: 'linear',
        variables: { in: 1, cached: 0.1, write: 1.25, out: 2 },
        terms: [
          { token_type: 'input', quantity_key: 'input_tokens', rate_key: 'in' },
          { token_type: 'cached_input', quantity_key: 'cached_input_tokens', rate_key: 'cached' },
          { token_type: 'cache_write', quantity_key: 'cache_write_tokens', rate_key: 'write' },
          { token_type: 'output', quantity_key: 'output_tokens', rate_key: 'out' },
        ],
      },
    };
    const usage = {
      inputTokens: 10_000,
      cachedInputTokens: 6_000,
      cacheWriteInputTokens: 3_000,
      outputTokens: 1000,
    };
    // plain 1,000 × 1 + read 6,000 × 0.1 + written 3,000 × 1.25 + output 1,000 × 2, per million
    expect(cost(pricing, usage)).toBeCloseTo((1000 + 600 + 3750 + 2000) / M, 12);
  });

  it('counts cache writes in a formula input_tokens term when the formula has no cache_write_tokens term', () => {
    const pricing = {
      amount: 0,
      currency: 'USD',
      unit: 'million_token',
      formula: {
        type: 'linear',
        variables: { in: 1, cached: 0.1 },
        terms: [
          { token_type: 'input', quantity_key: 'input_tokens', rate_key: 'in' },
          { token_type: 'cached_input', quantity_key: 'cached_input_tokens', rate_key: 'cached' },
        ],
      },
    };
    // the 3,000 written stay in input_tokens: (10,000 − 6,000) × 1 + 6,000 × 0.1, per million
    const usage = { inputTokens: 10_000, cachedInputTokens: 6_000, cacheWriteInputTokens: 3_000 };
    expect(cost(pricing, usage)).toBeCloseTo((4000 + 600) / M, 12);
    // with only a cache_write_tokens term, the reads stay in input_tokens: (10,000 − 3,000) × 1 + 3,000 × 2
    const writesOnly = {
      ...pricing,
      formula: {
        type: 'linear',
        variables: { in: 1, write: 2 },
        terms: [
          { token_type: 'input', quantity_key: 'input_tokens', rate_key: 'in' },
          { token_type: 'cache_write', quantity_key: 'cache_write_tokens', rate_key: 'write' },
        ],
      },
    };
    expect(cost(writesOnly, usage)).toBeCloseTo((7000 + 6000) / M, 12);
  });
});
