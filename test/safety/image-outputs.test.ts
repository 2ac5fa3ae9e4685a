/**
 * Image outputs of predictions checked by the offline image classifier in the worker (README, "Image
 * outputs"), end to end: a real Gantry, the built-in image model, the real model in its thread. The
 * generated pictures are benign, so they come out `safe` and are kept; the flagged path is in
 * image-block.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeCog, startFakeCog } from '../helpers/fake-cog.js';
import { COG_IMAGE, type ImageRig, startImageRig } from './image-rig.js';

let rig: ImageRig;
let cog: FakeCog;

beforeAll(async () => {
  cog = await startFakeCog();
  rig = await startImageRig('', cog.origin);
}, 60_000);
afterAll(async () => {
  await rig?.close();
  await cog?.close();
});

describe('image outputs of predictions', () => {
  it('are checked under a blocking policy: safe, kept, results in metadata.safety.output', {
    timeout: 120_000,
  }, async () => {
    const p = await rig.predict('block', {
      prompt: 'a green field',
      width: 256,
      height: 256,
      num_outputs: 2,
      output_format: 'png',
    });
    expect(p.status, p.error ?? '').toBe('succeeded');
    expect(p.output).toHaveLength(2);
    expect(rig.hasFiles(p.id)).toBe(true);
    const names = p.metadata.storage.files.map((f) => f.name);
    expect(p.metadata.safety).toEqual({
      policy: 'block',
      output: {
        content_filter_results: { sexual: { filtered: false, severity: 'safe' } },
        files: names.map((name) => ({
          name,
          content_filter_results: { sexual: { filtered: false, severity: 'safe' } },
        })),
      },
    });
  });

  // Seeded: the model misjudges a few of the abstract pictures (README, "Image outputs").
  it('are checked in every format the model writes', { timeout: 120_000 }, async () => {
    for (const output_format of ['jpg', 'webp']) {
      const p = await rig.predict('annotate', {
        prompt: 'a sunset',
        seed: 3,
        width: 128,
        height: 128,
        output_format,
      });
      expect(p.status, p.error ?? '').toBe('succeeded');
      expect(p.metadata.safety?.output?.content_filter_results).toEqual({
        sexual: { filtered: false, severity: 'safe' },
      });
    }
  });

  it("are checked in a Cog model's shaped output, wherever the files sit", { timeout: 60_000 }, async () => {
    cog.setBehavior({
      output: { images: [{ file: 'output.png' }], preview: { file: 'output.jpg' }, steps: 4 },
    });
    const p = await rig.predict('block', { prompt: 'a fox' }, COG_IMAGE);
    expect(p.status, p.error ?? '').toBe('succeeded');
    const names = p.metadata.storage.files.map((f) => f.name);
    expect(names).toHaveLength(2);
    expect(p.metadata.safety?.output).toEqual({
      content_filter_results: { sexual: { filtered: false, severity: 'safe' } },
      files: names.map((name) => ({
        name,
        content_filter_results: { sexual: { filtered: false, severity: 'safe' } },
      })),
    });
  });

  it('are not checked when no policy ran on the prediction, nor under a policy that is off', {
    timeout: 60_000,
  }, async () => {
    const none = await rig.predict(undefined);
    expect(none.status).toBe('succeeded');
    expect(none.metadata.safety).toBeUndefined();
    const off = await rig.predict('off');
    expect(off.status).toBe('succeeded');
    expect(off.metadata.safety).toEqual({ policy: 'off' });
  });

  it('count in the safety metrics as prediction completion checks by the nsfwjs classifier', async () => {
    const res = await fetch(`${rig.gantry.origin}/metrics`);
    const text = await res.text();
    expect(text).toMatch(
      /gantry_safety_checks_total\{api="predictions",stage="completion",classifier="nsfwjs",outcome="clean"\} [1-9]/,
    );
  });
});
