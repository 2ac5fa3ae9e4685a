/**
 * The offline image classifier on images made here with sharp: the real model in its worker thread,
 * nothing mocked. Plain colours of every format it reads are `safe`; what it cannot read is said so.
 */
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { ClassifierUnavailable } from '../../src/safety/classifier.js';
import { classifyImage, isClassifiableImage } from '../../src/safety/image/index.js';
import { checkImageOutputs } from '../../src/safety/image/outputs.js';
import { PRESET_POLICIES, type SafetyPolicy } from '../../src/safety/policy.js';

const block = PRESET_POLICIES.block as SafetyPolicy;

function flat(width: number, height: number, channels: 3 | 4 = 3) {
  const background = channels === 4 ? { r: 240, g: 240, b: 240, alpha: 0.5 } : { r: 30, g: 120, b: 200 };
  return sharp({ create: { width, height, channels, background } });
}

describe('classifyImage', () => {
  // The first call starts the thread and loads the model (a second or more on a busy machine).
  it('finds a flat colour PNG safe, with the model probabilities adding up to 1', {
    timeout: 90_000,
  }, async () => {
    const found = await classifyImage(await flat(512, 512).png().toBuffer(), 'image/png');
    expect(found?.sexual).toBe('safe');
    const total = Object.values(found?.probabilities ?? {}).reduce((a, b) => a + b, 0);
    expect(total).toBeCloseTo(1, 3);
  });

  it.each([
    ['image/jpeg', () => flat(300, 200).jpeg().toBuffer()],
    ['image/webp', () => flat(64, 640).webp().toBuffer()],
    ['image/gif', () => flat(100, 100).gif().toBuffer()],
    ['image/png; charset=binary', () => flat(32, 32, 4).png().toBuffer()],
    ['image/png', () => flat(200, 200).greyscale().png().toBuffer()],
  ])('reads %s and finds it safe', { timeout: 60_000 }, async (type, make) => {
    expect((await classifyImage(await make(), type))?.sexual).toBe('safe');
  });

  it('leaves other content types alone', async () => {
    expect(isClassifiableImage('audio/wav')).toBe(false);
    expect(isClassifiableImage('image/svg+xml')).toBe(false);
    expect(await classifyImage(Buffer.from('RIFF'), 'audio/wav')).toBeUndefined();
  });

  it('says an undecodable image could not be checked, and goes on with the next', {
    timeout: 60_000,
  }, async () => {
    const error = await classifyImage(Buffer.from('not a png at all'), 'image/png').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ClassifierUnavailable);
    expect((error as Error).message).toMatch(/could not be decoded/);
    expect((await classifyImage(await flat(64, 64).png().toBuffer(), 'image/png'))?.sexual).toBe('safe');
  });

  it('answers images sent at once, each its own', { timeout: 60_000 }, async () => {
    const png = await flat(64, 64).png().toBuffer();
    const answers = await Promise.all([
      classifyImage(png, 'image/png'),
      classifyImage(Buffer.from('garbage'), 'image/png').catch((e: Error) => e),
      classifyImage(png, 'image/png'),
    ]);
    expect((answers[0] as { sexual: string }).sexual).toBe('safe');
    expect(answers[1]).toBeInstanceOf(ClassifierUnavailable);
    expect((answers[2] as { sexual: string }).sexual).toBe('safe');
  });
});

describe('checkImageOutputs', () => {
  it('gives Azure-shaped results per file and together; a safe image is not blocked', {
    timeout: 60_000,
  }, async () => {
    const png = await flat(128, 128).png().toBuffer();
    const checked = await checkImageOutputs(block, [
      { name: 'output_0.png', contentType: 'image/png', data: png },
      { name: 'output_1.png', contentType: 'image/png', data: Buffer.from('broken') },
    ]);
    expect(checked.check.blocked).toBe(false);
    expect(checked.check.flagged).toEqual([]);
    // Only `sexual` is evaluated: the other categories are absent, never reported safe.
    expect(checked.results.content_filter_results).toEqual({ sexual: { filtered: false, severity: 'safe' } });
    expect(checked.results.files).toEqual([
      { name: 'output_0.png', content_filter_results: { sexual: { filtered: false, severity: 'safe' } } },
      {
        name: 'output_1.png',
        content_filter_results: {
          error: { code: 'content_filter_error', message: expect.stringMatching(/decoded/) },
        },
      },
    ]);
  });

  it('reports an error when no image could be checked, and does not block (fails open)', async () => {
    const checked = await checkImageOutputs(block, [
      { name: 'output_0.png', contentType: 'image/png', data: Buffer.from('broken') },
    ]);
    expect(checked.check.blocked).toBe(false);
    expect(checked.results.content_filter_results).toEqual({
      error: { code: 'content_filter_error', message: expect.stringMatching(/decoded/) },
    });
  });
});
