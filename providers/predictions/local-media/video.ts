/**
 * The `local-video` generator: an H.264 MP4 (yuv420p, faststart) in which a camera pans slowly across the
 * `local-image` picture for the same prompt and seed, with fades at both ends. The picture is painted once,
 * piped to ffmpeg as one raw frame, looped and cropped there, so a 5 s 180p clip takes a fraction of a
 * second. The pan's path comes from the prompt and seed too: the same input gives the same bytes.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runFfmpeg } from './ffmpeg.js';
import { aspectRatioValue, type ImageSize } from './image.js';
import { renderPicture } from './picture.js';
import { between, randomFor } from './random.js';

export const VIDEO_ASPECT_RATIOS = ['16:9', '9:16', '1:1', '4:3', '3:4', '21:9', '9:21'] as const;
export type VideoAspectRatio = (typeof VIDEO_ASPECT_RATIOS)[number];

export const VIDEO_DURATIONS = [5, 10] as const;
export type VideoDuration = (typeof VIDEO_DURATIONS)[number];

/** The short side in pixels. */
export const VIDEO_RESOLUTIONS = { '180p': 180, '360p': 360, '720p': 720 } as const;
export type VideoResolution = keyof typeof VIDEO_RESOLUTIONS;

export const VIDEO_FPS = 12;
export const VIDEO_CONTENT_TYPE = 'video/mp4';

/** The painted picture is this much larger than the frame, which leaves room for the pan. */
const PAN_MARGIN = 1.5;

export interface VideoRequest {
  prompt: string;
  seed: number;
  durationSeconds: VideoDuration;
  aspectRatio: VideoAspectRatio;
  resolution: VideoResolution;
}

export interface VideoOptions {
  signal?: AbortSignal;
  /** Whole percent, 0 first, strictly increasing, 100 once the file is complete. */
  onProgress?: (percent: number) => void;
}

function even(value: number): number {
  return Math.max(2, Math.round(value / 2) * 2);
}

/** Frame size: the short side from the resolution, the long one from the aspect ratio; both even (yuv420p). */
export function videoDimensions(aspectRatio: VideoAspectRatio, resolution: VideoResolution): ImageSize {
  const short = VIDEO_RESOLUTIONS[resolution];
  const ratio = aspectRatioValue(aspectRatio);
  return ratio >= 1
    ? { width: even(short * ratio), height: short }
    : { width: short, height: even(short / ratio) };
}

/** `crop` and `fade` filters: a Lissajous pan whose speeds and phases come from the prompt and seed. */
function filterGraph(request: VideoRequest, width: number, height: number): string {
  const random = randomFor(`${request.prompt}\u0000pan`, request.seed);
  const speedX = between(random, 0.3, 0.9).toFixed(4);
  const speedY = between(random, 0.2, 0.6).toFixed(4);
  const phaseX = between(random, 0, Math.PI * 2).toFixed(4);
  const phaseY = between(random, 0, Math.PI * 2).toFixed(4);
  const fadeOutStart = (request.durationSeconds - 0.5).toFixed(2);
  return [
    // Converting the single frame once, before it is looped, keeps the per-frame work to a crop.
    'format=yuv420p',
    'loop=loop=-1:size=1',
    `setpts=N/(${VIDEO_FPS}*TB)`,
    `crop=w=${width}:h=${height}:x='(iw-ow)/2*(1+sin(t*${speedX}+${phaseX}))':y='(ih-oh)/2*(1+sin(t*${speedY}+${phaseY}))'`,
    'fade=t=in:st=0:d=0.5',
    `fade=t=out:st=${fadeOutStart}:d=0.5`,
  ].join(',');
}

/** Reads ffmpeg's `-progress` key=value lines and reports whole percents, never going back. */
function progressReader(durationSeconds: number, report: (percent: number) => void): (line: string) => void {
  return (line) => {
    const [key, value] = line.split('=', 2);
    // out_time_us is the newer name; ffmpeg 4.x also prints the same microseconds as out_time_ms.
    if ((key !== 'out_time_us' && key !== 'out_time_ms') || value === undefined) return;
    const micros = Number(value);
    if (!Number.isFinite(micros) || micros < 0) return;
    // 100 is kept for the finished file: ffmpeg still writes the index (faststart) after the last frame.
    report(Math.min(99, Math.floor((micros / (durationSeconds * 1e6)) * 100)));
  };
}

/** The MP4 bytes for the request. */
export async function generateVideo(request: VideoRequest, options: VideoOptions = {}): Promise<Buffer> {
  const { width, height } = videoDimensions(request.aspectRatio, request.resolution);
  const pictureWidth = even(width * PAN_MARGIN);
  const pictureHeight = even(height * PAN_MARGIN);
  const picture = await renderPicture(request.prompt, request.seed, pictureWidth, pictureHeight);

  let lastPercent = -1;
  const report = (percent: number) => {
    if (percent <= lastPercent) return;
    lastPercent = percent;
    options.onProgress?.(percent);
  };
  report(0);

  // faststart moves the index to the front after encoding, which needs a seekable file, not a pipe.
  const dir = await mkdtemp(join(tmpdir(), 'gantry-video-'));
  const output = join(dir, 'output.mp4');
  try {
    await runFfmpeg({
      args: [
        ...['-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', `${pictureWidth}x${pictureHeight}`, '-i', 'pipe:0'],
        ...[
          '-vf',
          filterGraph(request, width, height),
          '-t',
          String(request.durationSeconds),
          '-r',
          String(VIDEO_FPS),
        ],
        ...['-c:v', 'libx264', '-preset', 'veryfast', '-crf', '28', '-pix_fmt', 'yuv420p'],
        ...[
          '-movflags',
          '+faststart',
          '-map_metadata',
          '-1',
          '-fflags',
          '+bitexact',
          '-flags:v',
          '+bitexact',
        ],
        ...['-nostats', '-progress', 'pipe:1', '-y', output],
      ],
      input: picture,
      signal: options.signal,
      onStdoutLine: progressReader(request.durationSeconds, report),
    });
    const video = await readFile(output);
    report(100);
    return video;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
