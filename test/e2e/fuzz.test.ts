import { describe, expect, it } from 'vitest';
import { runFuzz } from '../../scripts/fuzz.js';

describe('npm run fuzz, a quick bounded run', () => {
  it('1,500 seeded requests over every route: no 5xx, no answer outside the envelopes, none over 10 s', async () => {
    const result = await runFuzz({
      seed: 20261125,
      count: 1_500,
      seconds: 25,
      concurrency: 4,
      maxString: 16_384,
    });
    const report = result.failures.map((f) => `#${f.index} ${f.problem}\n${f.request}\n-> ${f.answer}`);
    expect(report.slice(0, 5).join('\n\n')).toBe('');
    expect(result.routes).toBeGreaterThan(50);
    // The time bound ends a slow run early; a run that sent too little would prove little.
    expect(result.sent).toBeGreaterThanOrEqual(1_000);
  }, 60_000);
});
