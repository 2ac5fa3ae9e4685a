/**
 * The flagged path of image outputs, end to end (README, "Image outputs"). The repository holds no
 * explicit image and the pictures made here are benign, so the operator's setting `safety.image` moves
 * the classifier's cut-offs until every image is `medium`: everything after the model's probabilities
 * (severity, policy, block, file deletion, results) is the real path. The mapping of real probabilities
 * onto severities is tested in image-mapping.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ImageRig, startImageRig } from './image-rig.js';

let rig: ImageRig;

beforeAll(async () => {
  // explicit >= 0 is medium, high never (explicit is never 1 here); suggestive never on its own.
  rig = await startImageRig(`
safety:
  image: { explicit_low: 0, explicit_medium: 0, explicit_high: 1, suggestive_low: 1 }
  policies:
    lenient: { mode: block, thresholds: { sexual: high } }
`);
}, 60_000);
afterAll(async () => {
  await rig?.close();
});

const FLAGGED = { sexual: { filtered: true, severity: 'medium' } };

describe('a flagged image output', () => {
  it('under block: fails the prediction, its files deleted, the results kept', {
    timeout: 120_000,
  }, async () => {
    const p = await rig.predict('block', {
      prompt: 'a calm blue sea',
      seed: 5,
      width: 128,
      height: 128,
      num_outputs: 2,
      output_format: 'png',
    });
    expect(p.status).toBe('failed');
    expect(p.error).toBe('output filtered by the content policy');
    expect(p.output).toBeNull();
    expect(p.metadata.storage.files).toEqual([]);
    expect(rig.hasFiles(p.id)).toBe(false);
    expect(p.metadata.safety).toEqual({
      policy: 'block',
      output: {
        content_filter_results: FLAGGED,
        files: [
          { name: 'output_0.png', content_filter_results: FLAGGED },
          { name: 'output_1.png', content_filter_results: FLAGGED },
        ],
      },
    });
  });

  it('under annotate: reported, not filtered, and kept', { timeout: 120_000 }, async () => {
    const p = await rig.predict('annotate');
    expect(p.status, p.error ?? '').toBe('succeeded');
    expect(rig.hasFiles(p.id)).toBe(true);
    expect(p.metadata.safety?.output?.content_filter_results).toEqual({
      sexual: { filtered: false, severity: 'medium' },
    });
  });

  it('under a blocking policy whose sexual threshold is higher: kept', { timeout: 120_000 }, async () => {
    const p = await rig.predict('lenient');
    expect(p.status, p.error ?? '').toBe('succeeded');
    expect(rig.hasFiles(p.id)).toBe(true);
    expect(p.metadata.safety?.output?.content_filter_results).toEqual({
      sexual: { filtered: false, severity: 'medium' },
    });
  });

  it('is counted as blocked and as flagged in the metrics', async () => {
    const text = await (await fetch(`${rig.gantry.origin}/metrics`)).text();
    expect(text).toMatch(
      /gantry_safety_checks_total\{api="predictions",stage="completion",classifier="nsfwjs",outcome="blocked"\} 1/,
    );
    expect(text).toMatch(
      /gantry_safety_flags_total\{api="predictions",stage="completion",category="sexual",action="blocked"\} 1/,
    );
    expect(text).toMatch(
      /gantry_safety_flags_total\{api="predictions",stage="completion",category="sexual",action="annotated"\} 1/,
    );
  });
});
