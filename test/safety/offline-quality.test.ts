/**
 * The offline classifier's measured quality on the labelled set (test/fixtures/safety/labelled.jsonl),
 * the same evaluation as `npm run safety:eval`: precision and recall per category must stay at or above
 * the floors the README states ("Classifiers"), which are FLOORS in scripts/safety-eval.ts.
 */
import { describe, expect, it } from 'vitest';
import { evaluateSet, FLOORS, isHeldOut, loadSet, type Score } from '../../scripts/safety-eval.js';
import { offlineClassifier } from '../../src/safety/offline/index.js';

const lines = loadSet();
const report = evaluateSet(offlineClassifier(), lines);

describe('offline classifier quality on the labelled set', () => {
  it('has a set large enough to mean something, with a held-out part', () => {
    expect(lines.length).toBeGreaterThanOrEqual(300);
    expect(lines.filter((_, i) => isHeldOut(i)).length).toBeGreaterThanOrEqual(60);
    for (const source of ['prompt', 'document', 'completion']) {
      expect(lines.some((l) => l.source === source)).toBe(true);
    }
  });

  it.each(Object.entries(FLOORS))('%s stays at or above its floor on the whole set', (category, floor) => {
    const score = report.parts.all[category] as Score;
    // Positives exist for every floored category, so recall is not vacuous.
    expect(score.tp + score.fn).toBeGreaterThan(5);
    expect(score.precision).toBeGreaterThanOrEqual(floor.precision);
    expect(score.recall).toBeGreaterThanOrEqual(floor.recall);
  });

  it('finds every kind of personal data with precision and recall >= 0.9', () => {
    for (const kind of ['email', 'phone', 'payment_card', 'iban', 'secret']) {
      const score = report.parts.all[`pii.${kind}`] as Score;
      expect(score.tp + score.fn, kind).toBeGreaterThan(5);
      expect(score.precision, kind).toBeGreaterThanOrEqual(0.9);
      expect(score.recall, kind).toBeGreaterThanOrEqual(0.9);
    }
  });

  it('reports no category below its floor (what makes `npm run safety:eval` exit 1)', () => {
    expect(report.below).toEqual([]);
  });
});
