/**
 * Gantry's built-in media models (`local` backend kind): real PNG/JPEG/WebP images, MP3/WAV speech and
 * MP4 video made on this machine with no model weights, so the prediction API works end to end out of the
 * box and in tests. The generators live in ./local-media/; this class routes a job to one of them by
 * model name, reports to the worker, and turns failures into BackendErrors.
 */
import { randomInt } from 'node:crypto';
import { abortError, throwIfAborted } from './local-media/abort.js';
import { generateSpeech, SPEECH_CONTENT_TYPES } from './local-media/audio.js';
import { FfmpegError } from './local-media/ffmpeg.js';
import { generateImage, IMAGE_CONTENT_TYPES } from './local-media/image.js';
import { InputError } from './local-media/input.js';
import { imageJob, speechRequest, videoJob } from './local-media/requests.js';
import { localMediaSchemas, MAX_SEED } from './local-media/schemas.js';
import { generateVideo, VIDEO_CONTENT_TYPE, VIDEO_FPS, videoDimensions } from './local-media/video.js';
import {
  type BackendContext,
  BackendError,
  type BackendEvents,
  type BackendJob,
  type BackendOutput,
  type BackendResult,
  type JsonObject,
  type PredictionBackend,
} from './types.js';

export { LOCAL_MEDIA_MODELS, type LocalMediaModel, localMediaSchemas } from './local-media/schemas.js';

export interface LocalMediaBackendOptions {
  /** The provider's name in the config; `local` by default. A BackendConfig fits here as it is. */
  name?: string;
}

export class LocalMediaBackend implements PredictionBackend {
  readonly name: string;
  readonly kind = 'local';
  /** One controller per run in flight, so close() can stop them all. */
  private readonly inFlight = new Set<AbortController>();
  private closed = false;

  constructor(options: LocalMediaBackendOptions = {}) {
    this.name = options.name ?? 'local';
  }

  async schemas(model: string): Promise<{ input?: JsonObject; output?: JsonObject } | undefined> {
    return localMediaSchemas(model);
  }

  async run(job: BackendJob, ctx: BackendContext): Promise<BackendResult> {
    if (this.closed) throw new BackendError('the local media backend is shut down', { retryable: true });
    const controller = new AbortController();
    const onAbort = () => controller.abort(ctx.signal.reason);
    if (ctx.signal.aborted) onAbort();
    else ctx.signal.addEventListener('abort', onAbort, { once: true });
    this.inFlight.add(controller);

    const startedAt = performance.now();
    try {
      throwIfAborted(controller.signal);
      ctx.events.processing();
      const outputs = await this.dispatch(job, controller.signal, ctx.events);
      throwIfAborted(controller.signal);
      return { outputs, predictTime: (performance.now() - startedAt) / 1000 };
    } catch (err) {
      throw this.classify(job.model, err, controller.signal);
    } finally {
      ctx.signal.removeEventListener('abort', onAbort);
      this.inFlight.delete(controller);
    }
  }

  /** Stops every run in flight; they reject with a retryable BackendError so the queue can run them again. */
  async close(): Promise<void> {
    this.closed = true;
    const reason = new BackendError('the local media backend was shut down', { retryable: true });
    for (const controller of this.inFlight) controller.abort(reason);
  }

  private async dispatch(
    job: BackendJob,
    signal: AbortSignal,
    events: BackendEvents,
  ): Promise<BackendOutput[]> {
    switch (job.model) {
      case 'local-image':
        return this.runImage(job.input, signal, events);
      case 'local-speech':
        return this.runSpeech(job.input, signal, events);
      case 'local-video':
        return this.runVideo(job.input, signal, events);
      default:
        throw new BackendError(`model ${job.model} is not one of the local media models`);
    }
  }

  private async runImage(
    input: JsonObject,
    signal: AbortSignal,
    events: BackendEvents,
  ): Promise<BackendOutput[]> {
    const { prompt, size, count, format, quality, ...rest } = imageJob(input);
    const seed = this.seed(rest.seed, events);
    const startedAt = performance.now();
    const outputs: BackendOutput[] = [];
    for (let index = 0; index < count; index++) {
      throwIfAborted(signal);
      // Image i uses seed + i, wrapped inside 32 bits so the largest seed with four outputs stays valid.
      const data = await generateImage({
        prompt,
        seed: (seed + index) % (MAX_SEED + 1),
        ...size,
        format,
        quality,
      });
      outputs.push({
        kind: 'bytes',
        data,
        contentType: IMAGE_CONTENT_TYPES[format],
        name: `output_${index}.${format}`,
      });
    }
    const took = Math.round(performance.now() - startedAt);
    events.log(
      `Generated ${count} image${count === 1 ? '' : 's'} (${size.width}x${size.height} ${format}) in ${took} ms`,
    );
    return outputs;
  }

  private async runSpeech(
    input: JsonObject,
    signal: AbortSignal,
    events: BackendEvents,
  ): Promise<BackendOutput[]> {
    const request = speechRequest(input);
    events.log(
      `Speaking ${request.text.length} characters with eSpeak NG (voice ${request.voice}, ${request.wordsPerMinute} wpm)`,
    );
    const startedAt = performance.now();
    const data = await generateSpeech(request, signal);
    events.log(`Made ${request.format} speech in ${Math.round(performance.now() - startedAt)} ms`);
    return [
      {
        kind: 'bytes',
        data,
        contentType: SPEECH_CONTENT_TYPES[request.format],
        name: `output.${request.format}`,
      },
    ];
  }

  private async runVideo(
    input: JsonObject,
    signal: AbortSignal,
    events: BackendEvents,
  ): Promise<BackendOutput[]> {
    const job = videoJob(input);
    const seed = this.seed(job.seed, events);
    const { width, height } = videoDimensions(job.aspectRatio, job.resolution);
    events.log(`Rendering ${job.durationSeconds} s of ${width}x${height} video at ${VIDEO_FPS} fps`);
    const startedAt = performance.now();
    const data = await generateVideo(
      { ...job, seed },
      { signal, onProgress: (percent) => events.progress(percent) },
    );
    events.log(`Encoded H.264 video in ${Math.round(performance.now() - startedAt)} ms`);
    return [{ kind: 'bytes', data, contentType: VIDEO_CONTENT_TYPE, name: 'output.mp4' }];
  }

  /** The caller's seed, or a random one, logged as Cog models do so the output can be reproduced. */
  private seed(given: number | undefined, events: BackendEvents): number {
    const seed = given ?? randomInt(0, MAX_SEED + 1);
    events.log(`Using seed: ${seed}`);
    return seed;
  }

  /**
   * After an abort the rejection is the abort's reason (an AbortError, a TimeoutError, or close()'s
   * retryable BackendError), whatever the generator threw on its way out; the rest become BackendErrors,
   * which do not retry: the same input would fail the same way.
   */
  private classify(model: string, err: unknown, signal: AbortSignal): unknown {
    if (signal.aborted) return abortError(signal);
    if (err instanceof BackendError) return err;
    if (err instanceof InputError) return new BackendError(err.message, { cause: err });
    const detail = err instanceof Error ? err.message : String(err);
    if (err instanceof FfmpegError)
      return new BackendError(`${model} failed to encode: ${detail}`, { cause: err });
    return new BackendError(`${model} failed: ${detail}`, { cause: err });
  }
}
