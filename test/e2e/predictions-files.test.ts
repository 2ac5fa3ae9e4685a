/**
 * Output files of predictions, downloaded as a client would (no API key: the signed URL is the
 * credential): real PNG/JPEG/WebP images whose dimensions follow the request (checked with sharp), MP3 and
 * WAV speech, MP4 video of the asked duration; headers that agree with `metadata.storage.files`; forged
 * links refused; and the retention purge (spec 2.3, 8), after which the prediction shows no data and
 * the files are gone.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_CONFIG, startGantry, type TestGantry } from '../helpers/gantry.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

const IMAGE = 'gantry/local-image';
const SPEECH = 'gantry/local-speech';
const VIDEO = 'gantry/local-video';

const MODELS = `
  - { namespace: ${IMAGE}, name: Local image, type: image, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-image }] }
  - { namespace: ${SPEECH}, name: Local speech, type: audio, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-speech }] }
  - { namespace: ${VIDEO}, name: Local video, type: video, vendor: { name: Gantry, slug: gantry }, serves: [predictions], routes: [{ provider: local, model: local-video }] }
`;
/** Outputs are kept 3 seconds after completion. */
const RETENTION_MS = 3000;
const CONFIG = `${LOCAL_CONFIG}${MODELS}
predictions: { retention_minutes: ${RETENTION_MS / 60_000}, webhooks: { allow_private: true } }
`;

interface FileInfo {
  name: string;
  type: string;
  size: number;
  url: string;
}

interface Prediction {
  id: string;
  status: string;
  output: string[] | string | null;
  completed_at: string | null;
  data_removed: boolean;
  metadata: { storage: { files: FileInfo[] }; data_available: boolean };
  urls: { get: string };
}

interface ErrorEnvelope {
  status: boolean;
  error: { http_status: number; error_id: string; message: string };
}

let gantry: TestGantry;
let receiver: WebhookReceiver;

beforeAll(async () => {
  gantry = await startGantry(CONFIG);
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  await receiver?.close();
  await gantry?.close();
});

async function predict(model: string, input: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  const res = await fetch(`${gantry.origin}/v1/predictions`, {
    method: 'POST',
    headers: { 'x-api-key': gantry.key, 'content-type': 'application/json' },
    body: JSON.stringify({ model, input, await: true, ...extra }),
  });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  const p = JSON.parse(text) as Prediction;
  expect(p.status, text).toBe('succeeded');
  return p;
}

async function getPrediction(id: string): Promise<Prediction> {
  const res = await fetch(`${gantry.origin}/v1/predictions/${id}`, { headers: { 'x-api-key': gantry.key } });
  expect(res.status).toBe(200);
  return (await res.json()) as Prediction;
}

interface Download {
  status: number;
  headers: Headers;
  bytes: Buffer;
}

/** Downloads without an API key, as a browser or download tool would. */
async function download(url: string, headers: Record<string, string> = {}): Promise<Download> {
  const res = await fetch(url, { headers });
  return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
}

/** Downloads every file of the prediction and checks the headers against storage.files. */
async function downloadAll(p: Prediction): Promise<Download[]> {
  const files = p.metadata.storage.files;
  expect(files.length).toBeGreaterThan(0);
  expect(p.metadata.data_available).toBe(true);
  const urls = Array.isArray(p.output) ? p.output : [p.output];
  expect(urls).toEqual(files.map((f) => f.url));
  const downloads: Download[] = [];
  for (const file of files) {
    expect(file.url.startsWith(`${gantry.origin}/v1/files/${p.id}/${file.name}?`)).toBe(true);
    const got = await download(file.url);
    expect(got.status, got.bytes.toString('utf8', 0, 300)).toBe(200);
    expect(got.headers.get('content-type')).toBe(file.type);
    expect(Number(got.headers.get('content-length'))).toBe(file.size);
    expect(got.bytes.length).toBe(file.size);
    downloads.push(got);
  }
  return downloads;
}

function expectFileError(got: Download, status: number, errorId: string) {
  expect(got.status, got.bytes.toString('utf8')).toBe(status);
  const body = JSON.parse(got.bytes.toString('utf8')) as ErrorEnvelope;
  expect(body.status).toBe(false);
  expect(body.error.error_id).toBe(errorId);
  expect(body.error.http_status).toBe(status);
}

const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** Duration (seconds) from the movie header, and the first video track's size from its track header. */
function mp4Facts(mp4: Buffer): { seconds: number; width: number; height: number } {
  const mvhd = mp4.indexOf('mvhd');
  expect(mvhd).toBeGreaterThan(0);
  const v1 = mp4[mvhd + 4] === 1;
  const timescale = mp4.readUInt32BE(mvhd + (v1 ? 24 : 16));
  const duration = v1 ? Number(mp4.readBigUInt64BE(mvhd + 28)) : mp4.readUInt32BE(mvhd + 20);
  const tkhd = mp4.indexOf('tkhd');
  expect(tkhd).toBeGreaterThan(0);
  const t1 = mp4[tkhd + 4] === 1;
  // version/flags, times, track id, reserved, duration, reserved, layer…matrix, then 16.16 width and height.
  const sizeAt = tkhd + 4 + (t1 ? 88 : 76);
  return {
    seconds: duration / timescale,
    width: mp4.readUInt32BE(sizeAt) >> 16,
    height: mp4.readUInt32BE(sizeAt + 4) >> 16,
  };
}

describe('image outputs', () => {
  it('are PNGs of 512x512 by default', async () => {
    const p = await predict(IMAGE, { prompt: 'a red sunset over hills', num_outputs: 2 });
    expect(p.metadata.storage.files.map((f) => [f.name, f.type])).toEqual([
      ['output_0.png', 'image/png'],
      ['output_1.png', 'image/png'],
    ]);
    const [a, b] = await downloadAll(p);
    for (const got of [a, b]) {
      expect(got?.bytes.subarray(0, 8).equals(PNG)).toBe(true);
      const meta = await sharp(got?.bytes).metadata();
      expect(meta.format).toBe('png');
      expect([meta.width, meta.height]).toEqual([512, 512]);
    }
    // Two images (seed and seed + 1), not one file twice.
    expect(a?.bytes.equals(b?.bytes ?? Buffer.alloc(0))).toBe(false);
  });

  it('are JPEGs in the requested aspect ratio', async () => {
    const p = await predict(IMAGE, { prompt: 'a teal sea', aspect_ratio: '16:9', output_format: 'jpg' });
    expect(p.metadata.storage.files[0]?.type).toBe('image/jpeg');
    const [got] = await downloadAll(p);
    expect([...(got?.bytes.subarray(0, 3) ?? [])]).toEqual([0xff, 0xd8, 0xff]);
    const meta = await sharp(got?.bytes).metadata();
    expect(meta.format).toBe('jpeg');
    const width = meta.width ?? 0;
    const height = meta.height ?? 0;
    expect(width / height).toBeCloseTo(16 / 9, 1);
    expect(width % 8).toBe(0);
    expect(height % 8).toBe(0);
    // About a quarter megapixel (the default size).
    expect(Math.abs(width * height - 262_144) / 262_144).toBeLessThan(0.1);

    const tall = await predict(IMAGE, { prompt: 'a tower', aspect_ratio: '9:16', output_format: 'jpg' });
    const [tallFile] = await downloadAll(tall);
    const tallMeta = await sharp(tallFile?.bytes).metadata();
    expect((tallMeta.width ?? 0) / (tallMeta.height ?? 1)).toBeCloseTo(9 / 16, 1);
  });

  it('are WebPs of exactly the width and height asked at the top level', async () => {
    const p = await predict(
      IMAGE,
      { prompt: 'night sky', output_format: 'webp' },
      { width: 320, height: 192 },
    );
    expect(p.metadata.storage.files[0]?.type).toBe('image/webp');
    const [got] = await downloadAll(p);
    expect(got?.bytes.toString('latin1', 0, 4)).toBe('RIFF');
    expect(got?.bytes.toString('latin1', 8, 12)).toBe('WEBP');
    const meta = await sharp(got?.bytes).metadata();
    expect(meta.format).toBe('webp');
    expect([meta.width, meta.height]).toEqual([320, 192]);
  });

  it('serve byte ranges and HEAD like a static file', async () => {
    const p = await predict(IMAGE, { prompt: 'ranges' });
    const file = p.metadata.storage.files[0] as FileInfo;
    const whole = await download(file.url);
    const part = await download(file.url, { range: 'bytes=0-7' });
    expect(part.status).toBe(206);
    expect(part.headers.get('content-range')).toBe(`bytes 0-7/${file.size}`);
    expect(part.bytes.equals(whole.bytes.subarray(0, 8))).toBe(true);
    const head = await fetch(file.url, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-length')).toBe(String(file.size));
  });
});

describe('speech and video outputs', () => {
  it('local-speech makes an MP3 by default and a WAV on request', async () => {
    const mp3 = await predict(SPEECH, { prompt: 'Hello from Gantry.' });
    expect(typeof mp3.output).toBe('string'); // the model's output schema is one URL
    expect(mp3.metadata.storage.files.map((f) => [f.name, f.type])).toEqual([['output.mp3', 'audio/mpeg']]);
    const [mp3File] = await downloadAll(mp3);
    const bytes = mp3File?.bytes ?? Buffer.alloc(0);
    const id3 = bytes.toString('latin1', 0, 3) === 'ID3';
    const frameSync = bytes[0] === 0xff && ((bytes[1] ?? 0) & 0xe0) === 0xe0;
    expect(id3 || frameSync).toBe(true);
    expect(bytes.length).toBeGreaterThan(1000);

    const wav = await predict(SPEECH, { prompt: 'Hello again.', output_format: 'wav' });
    expect(wav.metadata.storage.files[0]?.type).toBe('audio/wav');
    const [wavFile] = await downloadAll(wav);
    const w = wavFile?.bytes ?? Buffer.alloc(0);
    expect(w.toString('latin1', 0, 4)).toBe('RIFF');
    expect(w.toString('latin1', 8, 12)).toBe('WAVE');
    expect(w.readUInt32LE(4)).toBe(w.length - 8);
  });

  it('local-video makes an MP4 of 5 seconds by default, 10 with seconds: 10', async () => {
    const p = await predict(VIDEO, { prompt: 'golden hills' }, { webhook: { url: receiver.url } });
    expect(typeof p.output).toBe('string');
    expect(p.metadata.storage.files.map((f) => [f.name, f.type])).toEqual([['output.mp4', 'video/mp4']]);
    const [got] = await downloadAll(p);
    const mp4 = got?.bytes ?? Buffer.alloc(0);
    expect(mp4.toString('latin1', 4, 8)).toBe('ftyp');
    const facts = mp4Facts(mp4);
    expect(facts.seconds).toBeCloseTo(5, 1);
    expect([facts.width, facts.height]).toEqual([320, 180]); // 16:9 at 180p

    const ten = await predict(
      VIDEO,
      { prompt: 'a long pan', seconds: 10, aspect_ratio: '1:1' },
      { webhook: { url: receiver.url } },
    );
    const [tenFile] = await downloadAll(ten);
    const tenFacts = mp4Facts(tenFile?.bytes ?? Buffer.alloc(0));
    expect(tenFacts.seconds).toBeCloseTo(10, 1);
    expect([tenFacts.width, tenFacts.height]).toEqual([180, 180]);
  });
});

describe('a longer video', () => {
  // 10 s of video: ffmpeg reports progress every half second, and a quiet machine renders 5 s in less.
  it('reports progress while it renders, then is a 1280x720 MP4 of 10 seconds', async () => {
    const res = await fetch(`${gantry.origin}/v1/predictions`, {
      method: 'POST',
      headers: { 'x-api-key': gantry.key, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: VIDEO,
        input: { prompt: 'a slow pan', resolution: '720p', duration: 10 },
        webhook: { url: receiver.url },
      }),
    });
    expect(res.status).toBe(200);
    const { id } = (await res.json()) as Prediction;
    const seen: number[] = [];
    let done: (Prediction & { metrics: { progress?: number } }) | undefined;
    while (!done) {
      const latest = (await getPrediction(id)) as Prediction & { metrics: { progress?: number } };
      expect(typeof latest.metrics.progress).toBe('number');
      if (latest.status === 'succeeded' || latest.status === 'failed') done = latest;
      else seen.push(latest.metrics.progress as number);
      await new Promise((resolve) => setTimeout(resolve, 40));
    }
    expect(done.status).toBe('succeeded');
    expect(done.metrics.progress).toBe(100);
    // Progress moved on while it ran, and never went back.
    expect(seen.some((p) => p > 0 && p < 100)).toBe(true);
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
    const [got] = await downloadAll(done);
    const facts = mp4Facts(got?.bytes ?? Buffer.alloc(0));
    expect(facts.seconds).toBeCloseTo(10, 1);
    expect([facts.width, facts.height]).toEqual([1280, 720]);
  });
});

describe('file links', () => {
  it('refuse a tampered signature, expiry or name with 403', async () => {
    const p = await predict(IMAGE, { prompt: 'tamper', num_outputs: 2 });
    const [first, second] = p.metadata.storage.files as [FileInfo, FileInfo];
    expect((await download(first.url)).status).toBe(200);

    const url = new URL(first.url);
    const signature = url.searchParams.get('signature') ?? '';
    const flipped = new URL(first.url);
    flipped.searchParams.set('signature', (signature[0] === 'A' ? 'B' : 'A') + signature.slice(1));
    expectFileError(await download(flipped.toString()), 403, 'FILE_LINK_EXPIRED');

    const later = new URL(first.url);
    later.searchParams.set('expires', String(Number(url.searchParams.get('expires')) + 3600));
    expectFileError(await download(later.toString()), 403, 'FILE_LINK_EXPIRED');

    // The first file's signature does not open the second file.
    const swapped = new URL(second.url);
    swapped.searchParams.set('signature', signature);
    swapped.searchParams.set('expires', url.searchParams.get('expires') ?? '');
    expectFileError(await download(swapped.toString()), 403, 'FILE_LINK_EXPIRED');

    const unsigned = new URL(first.url);
    unsigned.search = '';
    expectFileError(await download(unsigned.toString()), 403, 'FILE_LINK_EXPIRED');
  });

  it('are purged after the retention window: no files, data_available false, output null, old URL 404', async () => {
    const p = await predict(IMAGE, { prompt: 'short lived' });
    const file = p.metadata.storage.files[0] as FileInfo;
    expect((await download(file.url)).status).toBe(200);
    const dir = join(gantry.gantry.config.predictions.filesDir, p.id);
    expect(existsSync(dir)).toBe(true);

    const started = Date.now();
    let purged: Prediction | undefined;
    while (Date.now() - started < 10_000) {
      const latest = await getPrediction(p.id);
      if (!latest.metadata.data_available) {
        purged = latest;
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    if (!purged) throw new Error('the files were never purged');
    // Not before the window ended.
    expect(Date.now() - Date.parse(p.completed_at as string)).toBeGreaterThanOrEqual(RETENTION_MS);
    expect(purged.status).toBe('succeeded');
    expect(purged.metadata.storage.files).toEqual([]);
    expect(purged.metadata.data_available).toBe(false);
    expect(purged.output).toBeNull();
    expect(purged.data_removed).toBe(true);
    expect(existsSync(dir)).toBe(false);

    // A freshly signed link to the same key proves the file itself is gone, not just the link expired.
    const blobs = gantry.gantry.predictions.deps.blobs;
    const fresh = blobs.urlFor(`${p.id}/${file.name}`, Math.floor(Date.now() / 1000) + 3600) as string;
    expectFileError(await download(fresh), 404, 'FILE_NOT_FOUND');
    // The link the client holds says so too: the file is gone (not "expired, fetch fresh URLs").
    expectFileError(await download(file.url), 404, 'FILE_NOT_FOUND');
  });
});
