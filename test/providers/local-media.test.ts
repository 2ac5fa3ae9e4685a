/**
 * The built-in media models make real files: every test decodes or parses what came out (sharp for
 * images, WAV/MP4 headers by hand, ffmpeg's own report for MP3) rather than trusting sizes or names.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_MEDIA_MODELS, LocalMediaBackend } from '../../providers/predictions/local.js';
import { ffmpegPath } from '../../providers/predictions/local-media/ffmpeg.js';
import { readWavInfo } from '../../providers/predictions/local-media/wav.js';
import {
  BackendError,
  type BackendEvents,
  type BackendOutput,
  type JsonObject,
} from '../../providers/predictions/types.js';

interface Recorded {
  processing: number;
  logs: string[];
  progress: number[];
}

function recorder(): { recorded: Recorded; events: BackendEvents } {
  const recorded: Recorded = { processing: 0, logs: [], progress: [] };
  const events: BackendEvents = {
    processing: () => {
      recorded.processing++;
    },
    log: (text) => recorded.logs.push(text),
    progress: (percent) => recorded.progress.push(percent),
    output: () => {},
  };
  return { recorded, events };
}

const backend = new LocalMediaBackend();
let scratch = '';

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'gantry-local-media-test-'));
});
afterAll(async () => {
  await backend.close();
  await rm(scratch, { recursive: true, force: true });
});

async function run(model: string, input: JsonObject, signal = new AbortController().signal) {
  const { recorded, events } = recorder();
  const result = await backend.run(
    { predictionId: crypto.randomUUID(), model, input, stream: false },
    { signal, events },
  );
  return { result, recorded };
}

function bytesOf(output: BackendOutput | undefined): { data: Buffer; contentType: string; name: string } {
  if (output?.kind !== 'bytes') throw new Error(`expected a bytes output, got ${output?.kind}`);
  return output;
}

/** What `ffmpeg -i file` says about a media file (ffprobe is not shipped): duration and stream line. */
async function probe(data: Buffer, name: string): Promise<{ durationSeconds: number; stream: string }> {
  const file = join(scratch, `${crypto.randomUUID()}-${name}`);
  await writeFile(file, data);
  const { stderr } = spawnSync(ffmpegPath(), ['-hide_banner', '-i', file], { encoding: 'utf8' });
  const duration = /Duration: (\d+):(\d+):(\d+(?:\.\d+)?)/.exec(stderr);
  if (!duration) throw new Error(`no duration in ffmpeg's report: ${stderr}`);
  const [, h, m, s] = duration.map(Number) as [number, number, number, number];
  return { durationSeconds: h * 3600 + m * 60 + s, stream: /Stream #0:0.*/.exec(stderr)?.[0] ?? '' };
}

/** Top-level MP4 boxes in order, and the movie duration from `moov/mvhd`. */
function readMp4(data: Buffer): { boxes: string[]; durationSeconds: number } {
  const boxes: string[] = [];
  let durationSeconds = Number.NaN;
  const walk = (start: number, end: number, depth: number) => {
    for (let offset = start; offset + 8 <= end; ) {
      const size = data.readUInt32BE(offset);
      const type = data.toString('latin1', offset + 4, offset + 8);
      if (size < 8) break;
      if (depth === 0) boxes.push(type);
      if (type === 'moov') walk(offset + 8, offset + size, depth + 1);
      if (type === 'mvhd') {
        const body = offset + 8;
        const version = data.readUInt8(body);
        const timescale = version === 1 ? data.readUInt32BE(body + 20) : data.readUInt32BE(body + 12);
        const duration =
          version === 1 ? Number(data.readBigUInt64BE(body + 24)) : data.readUInt32BE(body + 16);
        durationSeconds = duration / timescale;
      }
      offset += size;
    }
  };
  walk(0, data.length, 0);
  return { boxes, durationSeconds };
}

/** ffmpeg processes that are children of this test process, by pid (Linux /proc). */
function childFfmpegPids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // pid (comm) state ppid ...: comm may hold spaces, so split after the closing parenthesis.
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (comm === 'ffmpeg' && ppid === process.pid) pids.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

async function waitFor<T>(probeOnce: () => T | undefined, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probeOnce();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('LocalMediaBackend schemas', () => {
  it('publishes Cog-style input and output schemas that ajv compiles and fills defaults from', async () => {
    const ajv = new Ajv({ strict: false, useDefaults: true });
    ajv.addVocabulary(['x-order']);
    const outputs: Record<string, JsonObject | undefined> = {};
    for (const model of LOCAL_MEDIA_MODELS) {
      const schemas = await backend.schemas(model);
      expect(schemas?.input).toMatchObject({ type: 'object', title: 'Input', required: ['prompt'] });
      expect(schemas?.input?.properties).toMatchObject({ prompt: { type: 'string', 'x-order': 0 } });
      outputs[model] = schemas?.output;
      const input: JsonObject = { prompt: 'hello' };
      expect(ajv.validate(schemas?.input ?? {}, input)).toBe(true);
      expect(Object.keys(input).length).toBeGreaterThan(2);
    }
    expect(outputs['local-image']).toMatchObject({ type: 'array', items: { type: 'string', format: 'uri' } });
    expect(outputs['local-speech']).toMatchObject({ type: 'string', format: 'uri' });
    expect(outputs['local-video']).toMatchObject({ type: 'string', format: 'uri' });

    const image = await backend.schemas('local-image');
    const validate = ajv.compile(image?.input ?? {});
    const filled: JsonObject = { prompt: 'x' };
    validate(filled);
    expect(filled).toEqual({
      prompt: 'x',
      aspect_ratio: '1:1',
      megapixels: '0.25',
      num_outputs: 1,
      output_format: 'png',
      output_quality: 80,
    });
    expect(validate({ prompt: 'x', num_outputs: 5 })).toBe(false);
    expect(validate({ prompt: 'x', width: 4096 })).toBe(false);
    expect(validate({ prompt: 'x', aspect_ratio: '2:1' })).toBe(false);
    expect(await backend.schemas('local-chat')).toBeUndefined();
  });
});

describe('local-image', () => {
  it('makes a 512x512 PNG by default and reports processing, the seed and a summary', async () => {
    const { result, recorded } = await run('local-image', { prompt: 'a lighthouse at sunset', seed: 7 });
    expect(result.outputs).toHaveLength(1);
    const image = bytesOf(result.outputs[0]);
    expect(image.name).toBe('output_0.png');
    expect(image.contentType).toBe('image/png');
    expect(image.data.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    const meta = await sharp(image.data).metadata();
    expect([meta.format, meta.width, meta.height]).toEqual(['png', 512, 512]);
    // A picture, not a flat fill: the sky gradient, sun and hills give many distinct colours.
    const stats = await sharp(image.data).stats();
    expect(stats.channels[0]!.stdev).toBeGreaterThan(10);
    expect(recorded.processing).toBe(1);
    expect(recorded.logs).toContain('Using seed: 7');
    expect(recorded.logs.join('\n')).toMatch(/Generated 1 image \(512x512 png\)/);
    expect(result.predictTime).toBeGreaterThan(0);
  });

  it('writes JPEG and WebP at the aspect ratio asked for, with num_outputs images', async () => {
    const { result } = await run('local-image', {
      prompt: 'blue ocean',
      aspect_ratio: '16:9',
      output_format: 'jpg',
      num_outputs: 3,
      seed: 1,
    });
    expect(result.outputs.map((output) => bytesOf(output).name)).toEqual([
      'output_0.jpg',
      'output_1.jpg',
      'output_2.jpg',
    ]);
    const images = result.outputs.map((output) => bytesOf(output).data);
    for (const data of images) {
      expect(data.subarray(0, 3)).toEqual(Buffer.from([0xff, 0xd8, 0xff]));
      const meta = await sharp(data).metadata();
      expect([meta.format, meta.width, meta.height]).toEqual(['jpeg', 680, 384]);
    }
    // Each image has its own seed (seed + index), so no two are the same.
    expect(new Set(images.map((data) => data.toString('base64'))).size).toBe(3);

    const webp = bytesOf(
      (await run('local-image', { prompt: 'x', aspect_ratio: '9:21', output_format: 'webp' })).result
        .outputs[0],
    );
    expect(webp.contentType).toBe('image/webp');
    expect(webp.data.toString('latin1', 0, 4)).toBe('RIFF');
    expect(webp.data.toString('latin1', 8, 12)).toBe('WEBP');
    const meta = await sharp(webp.data).metadata();
    expect([meta.format, meta.width, meta.height]).toEqual(['webp', 336, 784]);
  });

  it('honours width and height: rounded to multiples of 8, one side alone keeps the aspect ratio', async () => {
    const sizeOf = async (input: JsonObject) => {
      const meta = await sharp(
        bytesOf((await run('local-image', { prompt: 'p', seed: 3, ...input })).result.outputs[0]).data,
      ).metadata();
      return [meta.width, meta.height];
    };
    expect(await sizeOf({ width: 1001, height: 333 })).toEqual([1000, 336]);
    expect(await sizeOf({ width: 640, aspect_ratio: '4:3' })).toEqual([640, 480]);
    expect(await sizeOf({ height: 2048, aspect_ratio: '21:9' })).toEqual([2048, 880]);
    expect(await sizeOf({ megapixels: '1', aspect_ratio: '1:1', output_format: 'jpg' })).toEqual([
      1024, 1024,
    ]);
  });

  it('gives the same bytes for the same prompt and seed, and different ones otherwise', async () => {
    const image = async (prompt: string, seed: number) =>
      bytesOf((await run('local-image', { prompt, seed, output_format: 'webp' })).result.outputs[0]).data;
    const first = await image('a red fox in the snow', 42);
    expect((await image('a red fox in the snow', 42)).equals(first)).toBe(true);
    expect((await image('a red fox in the snow', 43)).equals(first)).toBe(false);
    expect((await image('a grey fox in the snow', 42)).equals(first)).toBe(false);
  });

  it('makes smaller files at lower output_quality', async () => {
    const sizeAt = async (quality: number) =>
      bytesOf(
        (await run('local-image', { prompt: 'q', seed: 5, output_format: 'jpg', output_quality: quality }))
          .result.outputs[0],
      ).data.length;
    expect(await sizeAt(10)).toBeLessThan((await sizeAt(95)) * 0.7);
  });

  it('picks and logs a seed when none is given', async () => {
    const { recorded } = await run('local-image', { prompt: 'random' });
    expect(recorded.logs.some((line) => /^Using seed: \d+$/.test(line))).toBe(true);
  });
});

describe('local-speech', () => {
  const sentence =
    'Hello from Gantry. This is the built in speech model, speaking from a web assembly build.';

  it('speaks the prompt into a 16-bit mono WAV whose length follows the speaking rate', async () => {
    const { result, recorded } = await run('local-speech', { prompt: sentence, output_format: 'wav' });
    const audio = bytesOf(result.outputs[0]);
    expect([audio.name, audio.contentType]).toEqual(['output.wav', 'audio/wav']);
    const wav = readWavInfo(audio.data);
    expect([wav.sampleRate, wav.channels, wav.bitsPerSample]).toEqual([22050, 1, 16]);
    expect(wav.durationSeconds).toBeGreaterThan(3);
    expect(wav.durationSeconds).toBeLessThan(12);
    // Not silence: 16-bit samples with real amplitude.
    const samples = new Int16Array(
      audio.data.buffer.slice(
        audio.data.byteOffset + wav.dataOffset,
        audio.data.byteOffset + wav.dataOffset + wav.dataBytes,
      ),
    );
    expect(samples.reduce((peak, sample) => Math.max(peak, Math.abs(sample)), 0)).toBeGreaterThan(3000);
    expect(recorded.processing).toBe(1);
    expect(recorded.logs[0]).toMatch(/^Speaking \d+ characters with eSpeak NG \(voice en-us, 175 wpm\)$/);

    const fast = readWavInfo(
      bytesOf(
        (
          await run('local-speech', {
            prompt: sentence,
            output_format: 'wav',
            speed: 350,
            voice: 'en-gb',
            voice_variant: 'f3',
          })
        ).result.outputs[0],
      ).data,
    );
    expect(fast.durationSeconds).toBeLessThan(wav.durationSeconds * 0.7);
  });

  it('encodes MP3 by default: MPEG layer III frames of the same length as the speech', async () => {
    const [{ result }, { result: wavResult }] = await Promise.all([
      run('local-speech', { prompt: sentence }),
      run('local-speech', { prompt: sentence, output_format: 'wav' }),
    ]);
    const audio = bytesOf(result.outputs[0]);
    expect([audio.name, audio.contentType]).toEqual(['output.mp3', 'audio/mpeg']);
    // Frame sync (11 bits), MPEG-2 (22,050 Hz), layer III.
    expect(audio.data[0]).toBe(0xff);
    expect(audio.data[1]! & 0xe0).toBe(0xe0);
    expect((audio.data[1]! >> 3) & 0b11).toBe(0b10);
    expect((audio.data[1]! >> 1) & 0b11).toBe(0b01);
    const mp3 = await probe(audio.data, 'speech.mp3');
    expect(mp3.stream).toMatch(/Audio: mp3, 22050 Hz, mono/);
    const wavSeconds = readWavInfo(bytesOf(wavResult.outputs[0]).data).durationSeconds;
    expect(Math.abs(mp3.durationSeconds - wavSeconds)).toBeLessThan(0.2);
  });

  it('rejects an empty or too long prompt as a non-retryable BackendError naming the field', async () => {
    for (const prompt of ['  ', 'a'.repeat(5001)]) {
      const error = await run('local-speech', { prompt }).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(BackendError);
      expect((error as BackendError).retryable).toBe(false);
      expect((error as BackendError).message).toMatch(/^input\.prompt /);
    }
  });

  it('stops synthesis at once on abort', async () => {
    const controller = new AbortController();
    const pending = run('local-speech', { prompt: 'A long text to speak. '.repeat(200) }, controller.signal);
    setTimeout(() => controller.abort(), 50);
    const startedAt = Date.now();
    const error = await pending.catch((err: unknown) => err);
    expect((error as Error).name).toBe('AbortError');
    expect(Date.now() - startedAt).toBeLessThan(1000);
  });
});

describe('local-video', () => {
  it('renders a 5 s H.264 MP4 (faststart) at 320x180 by default, reporting progress up to 100', async () => {
    const { result, recorded } = await run('local-video', { prompt: 'mountains at night', seed: 11 });
    const video = bytesOf(result.outputs[0]);
    expect([video.name, video.contentType]).toEqual(['output.mp4', 'video/mp4']);
    expect(video.data.toString('latin1', 4, 8)).toBe('ftyp');
    const mp4 = readMp4(video.data);
    // faststart: the index (moov) comes before the media data, so playback starts before the download ends.
    expect(mp4.boxes.indexOf('moov')).toBeLessThan(mp4.boxes.indexOf('mdat'));
    expect(Math.abs(mp4.durationSeconds - 5)).toBeLessThanOrEqual(0.2);
    expect((await probe(video.data, 'video.mp4')).stream).toMatch(/Video: h264 .*yuv420p.*320x180/);

    const progress = recorded.progress;
    expect(progress[0]).toBe(0);
    expect(progress.at(-1)).toBe(100);
    expect(progress.some((percent) => percent > 0 && percent < 100)).toBe(true);
    for (let i = 1; i < progress.length; i++) expect(progress[i]).toBeGreaterThan(progress[i - 1]!);
    expect(recorded.logs).toContain('Using seed: 11');
    expect(recorded.logs).toContain('Rendering 5 s of 320x180 video at 12 fps');
  });

  it('makes 10 s videos from `seconds` or `duration`, in the aspect ratio asked for', async () => {
    const [bySeconds, byDuration] = await Promise.all([
      run('local-video', { prompt: 'p', seconds: 10, aspect_ratio: '9:16', seed: 2 }),
      run('local-video', { prompt: 'p', duration: 10, seed: 2 }),
    ]);
    const portrait = bytesOf(bySeconds.result.outputs[0]).data;
    expect(Math.abs(readMp4(portrait).durationSeconds - 10)).toBeLessThanOrEqual(0.2);
    expect((await probe(portrait, 'portrait.mp4')).stream).toMatch(/180x320/);
    expect(
      Math.abs(readMp4(bytesOf(byDuration.result.outputs[0]).data).durationSeconds - 10),
    ).toBeLessThanOrEqual(0.2);
  });

  it('kills ffmpeg at once on abort and rejects with an AbortError', async () => {
    const controller = new AbortController();
    const pending = run(
      'local-video',
      { prompt: 'slow', duration: 10, resolution: '720p' },
      controller.signal,
    );
    const pid = await waitFor(() => childFfmpegPids()[0], 5000);
    controller.abort();
    const startedAt = Date.now();
    const error = await pending.catch((err: unknown) => err);
    expect((error as Error).name).toBe('AbortError');
    expect(Date.now() - startedAt).toBeLessThan(1000);
    expect(existsSync(`/proc/${pid}`)).toBe(false);
  });
});

describe('LocalMediaBackend errors and shutdown', () => {
  it('fails unknown models and bad inputs without retry, naming the field', async () => {
    const unknown = await run('local-chat', { prompt: 'x' }).catch((err: unknown) => err);
    expect(unknown).toBeInstanceOf(BackendError);
    expect((unknown as BackendError).retryable).toBe(false);
    const bad = await run('local-image', { prompt: 'x', width: 'wide' }).catch((err: unknown) => err);
    expect(bad).toBeInstanceOf(BackendError);
    expect((bad as BackendError).message).toBe('input.width must be an integer');
  });

  it('rejects at once, before processing, when the signal is already aborted', async () => {
    const controller = new AbortController();
    controller.abort();
    const { recorded, events } = recorder();
    const job = {
      predictionId: crypto.randomUUID(),
      model: 'local-image',
      input: { prompt: 'x' },
      stream: false,
    };
    const error = await backend.run(job, { signal: controller.signal, events }).catch((err: unknown) => err);
    expect((error as Error).name).toBe('AbortError');
    expect(recorded.processing).toBe(0);
  });

  it('close() stops runs in flight with a retryable error and refuses new ones', async () => {
    const own = new LocalMediaBackend({ name: 'media' });
    expect([own.name, own.kind]).toEqual(['media', 'local']);
    const { events } = recorder();
    const job = {
      predictionId: crypto.randomUUID(),
      model: 'local-video',
      input: { prompt: 'x', duration: 10, resolution: '720p' },
      stream: false,
    };
    const pending = own
      .run(job, { signal: new AbortController().signal, events })
      .catch((err: unknown) => err);
    await waitFor(() => childFfmpegPids()[0], 5000);
    await own.close();
    const error = await pending;
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).retryable).toBe(true);
    const after = await own
      .run(job, { signal: new AbortController().signal, events })
      .catch((err: unknown) => err);
    expect((after as BackendError).retryable).toBe(true);
  });
});
