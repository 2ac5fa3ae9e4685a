/**
 * Prediction inputs (the published schemas' field names) turned into generator requests, with the
 * schemas' defaults for anything missing. A seed is left undefined when not given: the backend picks
 * and logs one.
 */
import type { JsonObject } from '../types.js';
import {
  SPEECH_FORMATS,
  SPEECH_MAX_CHARS,
  SPEECH_MAX_WPM,
  SPEECH_MIN_WPM,
  SPEECH_VARIANTS,
  SPEECH_VOICES,
  type SpeechRequest,
} from './audio.js';
import {
  IMAGE_ASPECT_RATIOS,
  IMAGE_FORMATS,
  IMAGE_MAX_SIDE,
  IMAGE_MEGAPIXELS,
  IMAGE_MIN_SIDE,
  type ImageFormat,
  type ImageSize,
  imageDimensions,
} from './image.js';
import {
  InputError,
  readEnum,
  readInteger,
  readOptionalEnum,
  readOptionalInteger,
  readString,
} from './input.js';
import {
  IMAGE_DEFAULTS,
  MAX_IMAGE_OUTPUTS,
  MAX_SEED,
  PROMPT_MAX_CHARS,
  SPEECH_DEFAULTS,
  VIDEO_DEFAULTS,
} from './schemas.js';
import {
  VIDEO_ASPECT_RATIOS,
  VIDEO_DURATIONS,
  VIDEO_RESOLUTIONS,
  type VideoRequest,
  type VideoResolution,
} from './video.js';

export interface ImageJob {
  prompt: string;
  size: ImageSize;
  count: number;
  format: ImageFormat;
  quality: number;
  seed: number | undefined;
}

export function imageJob(input: JsonObject): ImageJob {
  const side = { min: IMAGE_MIN_SIDE, max: IMAGE_MAX_SIDE };
  return {
    prompt: readPrompt(input),
    size: imageDimensions({
      aspectRatio: readEnum(input, 'aspect_ratio', IMAGE_ASPECT_RATIOS, IMAGE_DEFAULTS.aspect_ratio),
      megapixels: readEnum(input, 'megapixels', IMAGE_MEGAPIXELS, IMAGE_DEFAULTS.megapixels),
      width: readOptionalInteger(input, 'width', side),
      height: readOptionalInteger(input, 'height', side),
    }),
    count: readInteger(input, 'num_outputs', { min: 1, max: MAX_IMAGE_OUTPUTS }, IMAGE_DEFAULTS.num_outputs),
    format: readEnum(input, 'output_format', IMAGE_FORMATS, IMAGE_DEFAULTS.output_format),
    quality: readInteger(input, 'output_quality', { min: 1, max: 100 }, IMAGE_DEFAULTS.output_quality),
    seed: readSeed(input),
  };
}

export function speechRequest(input: JsonObject): SpeechRequest {
  const text = readString(input, 'prompt');
  if (text.trim() === '') throw new InputError('input.prompt must contain text to speak');
  if (text.length > SPEECH_MAX_CHARS) {
    throw new InputError(`input.prompt is longer than ${SPEECH_MAX_CHARS} characters`);
  }
  return {
    text,
    voice: readEnum(input, 'voice', SPEECH_VOICES, SPEECH_DEFAULTS.voice),
    variant: readEnum(input, 'voice_variant', SPEECH_VARIANTS, SPEECH_DEFAULTS.voice_variant),
    wordsPerMinute: readInteger(
      input,
      'speed',
      { min: SPEECH_MIN_WPM, max: SPEECH_MAX_WPM },
      SPEECH_DEFAULTS.speed,
    ),
    pitch: readInteger(input, 'pitch', { min: 0, max: 99 }, SPEECH_DEFAULTS.pitch),
    format: readEnum(input, 'output_format', SPEECH_FORMATS, SPEECH_DEFAULTS.output_format),
  };
}

export type VideoJob = Omit<VideoRequest, 'seed'> & { seed: number | undefined };

export function videoJob(input: JsonObject): VideoJob {
  const resolutions = Object.keys(VIDEO_RESOLUTIONS) as VideoResolution[];
  return {
    prompt: readPrompt(input),
    // `seconds` is the other name some video models use; when both are sent, `duration` may only be the
    // default that validation filled in, so `seconds` wins.
    durationSeconds:
      readOptionalEnum(input, 'seconds', VIDEO_DURATIONS) ??
      readEnum(input, 'duration', VIDEO_DURATIONS, VIDEO_DEFAULTS.duration),
    aspectRatio: readEnum(input, 'aspect_ratio', VIDEO_ASPECT_RATIOS, VIDEO_DEFAULTS.aspect_ratio),
    resolution: readEnum(input, 'resolution', resolutions, VIDEO_DEFAULTS.resolution),
    seed: readSeed(input),
  };
}

function readPrompt(input: JsonObject): string {
  const prompt = readString(input, 'prompt');
  if (prompt.length > PROMPT_MAX_CHARS) {
    throw new InputError(`input.prompt is longer than ${PROMPT_MAX_CHARS} characters`);
  }
  return prompt;
}

function readSeed(input: JsonObject): number | undefined {
  return readOptionalInteger(input, 'seed', { min: 0, max: MAX_SEED });
}
