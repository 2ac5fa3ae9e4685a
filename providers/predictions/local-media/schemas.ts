/**
 * Cog-style JSON Schemas of the built-in media models. The catalog publishes them and Gantry validates
 * inputs against them (ajv, defaults applied), so every default, bound and enum the generators rely on is
 * stated here; the backend reads inputs with the same defaults in case it is called without validation.
 */
import type { JsonObject } from '../types.js';
import {
  SPEECH_FORMATS,
  SPEECH_MAX_CHARS,
  SPEECH_MAX_WPM,
  SPEECH_MIN_WPM,
  SPEECH_VARIANTS,
  SPEECH_VOICES,
} from './audio.js';
import {
  IMAGE_ASPECT_RATIOS,
  IMAGE_FORMATS,
  IMAGE_MAX_SIDE,
  IMAGE_MEGAPIXELS,
  IMAGE_MIN_SIDE,
} from './image.js';
import { VIDEO_ASPECT_RATIOS, VIDEO_DURATIONS, VIDEO_RESOLUTIONS } from './video.js';

export const LOCAL_MEDIA_MODELS = ['local-image', 'local-speech', 'local-video'] as const;
export type LocalMediaModel = (typeof LOCAL_MEDIA_MODELS)[number];

export function isLocalMediaModel(model: string): model is LocalMediaModel {
  return (LOCAL_MEDIA_MODELS as readonly string[]).includes(model);
}

/** The largest seed: the generators' random state is 32 bits. */
export const MAX_SEED = 4294967295;

/** Defaults the backend applies itself when an input arrives without them. */
export const IMAGE_DEFAULTS = {
  aspect_ratio: '1:1',
  megapixels: '0.25',
  num_outputs: 1,
  output_format: 'png',
  output_quality: 80,
} as const;
export const SPEECH_DEFAULTS = {
  voice: 'en-us',
  voice_variant: 'default',
  speed: 175,
  pitch: 50,
  output_format: 'mp3',
} as const;
export const VIDEO_DEFAULTS = { duration: 5, aspect_ratio: '16:9', resolution: '180p' } as const;

export const MAX_IMAGE_OUTPUTS = 4;
/**
 * The longest image or video prompt, as a real model's text encoder has a context (FLUX's T5: 512
 * tokens, about 2,000 characters): a bounded input, refused at create time by the schema.
 */
export const PROMPT_MAX_CHARS = 5000;

const seedProperty = (order: number): JsonObject => ({
  type: 'integer',
  title: 'Seed',
  description:
    'Random seed: the same input and seed give the same output. Leave blank to pick one at random.',
  minimum: 0,
  maximum: MAX_SEED,
  'x-order': order,
});

const uriOutput: JsonObject = { type: 'string', title: 'Output', format: 'uri' };

const imageInput: JsonObject = {
  type: 'object',
  title: 'Input',
  required: ['prompt'],
  properties: {
    prompt: {
      type: 'string',
      title: 'Prompt',
      description:
        'What to picture. Colour words (red, golden, teal…) and mood words (sunset, night…) steer the palette.',
      maxLength: PROMPT_MAX_CHARS,
      'x-order': 0,
    },
    aspect_ratio: {
      type: 'string',
      title: 'Aspect Ratio',
      description: 'Aspect ratio of the image; ignored when both width and height are set.',
      enum: [...IMAGE_ASPECT_RATIOS],
      default: IMAGE_DEFAULTS.aspect_ratio,
      'x-order': 1,
    },
    megapixels: {
      type: 'string',
      title: 'Megapixels',
      description:
        'Approximate size when width and height are not set: "1" is about 1024x1024, "0.25" 512x512.',
      enum: [...IMAGE_MEGAPIXELS],
      default: IMAGE_DEFAULTS.megapixels,
      'x-order': 2,
    },
    width: {
      type: 'integer',
      title: 'Width',
      description:
        'Width in pixels, rounded to a multiple of 8. With height alone or width alone, the aspect ratio gives the other side.',
      minimum: IMAGE_MIN_SIDE,
      maximum: IMAGE_MAX_SIDE,
      'x-order': 3,
    },
    height: {
      type: 'integer',
      title: 'Height',
      description: 'Height in pixels, rounded to a multiple of 8.',
      minimum: IMAGE_MIN_SIDE,
      maximum: IMAGE_MAX_SIDE,
      'x-order': 4,
    },
    num_outputs: {
      type: 'integer',
      title: 'Number of Outputs',
      description: 'How many images to make; image i uses seed + i.',
      minimum: 1,
      maximum: MAX_IMAGE_OUTPUTS,
      default: IMAGE_DEFAULTS.num_outputs,
      'x-order': 5,
    },
    seed: seedProperty(6),
    output_format: {
      type: 'string',
      title: 'Output Format',
      description: 'Format of the output images.',
      enum: [...IMAGE_FORMATS],
      default: IMAGE_DEFAULTS.output_format,
      'x-order': 7,
    },
    output_quality: {
      type: 'integer',
      title: 'Output Quality',
      description: 'Quality of JPEG and WebP output, from 1 (smallest) to 100 (best). Not relevant for PNG.',
      minimum: 1,
      maximum: 100,
      default: IMAGE_DEFAULTS.output_quality,
      'x-order': 8,
    },
  },
};

const speechInput: JsonObject = {
  type: 'object',
  title: 'Input',
  required: ['prompt'],
  properties: {
    prompt: {
      type: 'string',
      title: 'Prompt',
      description: `The text to speak, up to ${SPEECH_MAX_CHARS} characters.`,
      maxLength: SPEECH_MAX_CHARS,
      'x-order': 0,
    },
    voice: {
      type: 'string',
      title: 'Voice',
      description: 'Language and accent (eSpeak NG voice).',
      enum: [...SPEECH_VOICES],
      default: SPEECH_DEFAULTS.voice,
      'x-order': 1,
    },
    voice_variant: {
      type: 'string',
      title: 'Voice Variant',
      description: 'Timbre: m1-m7 are male, f1-f5 female variants; "default" is the voice as it is.',
      enum: [...SPEECH_VARIANTS],
      default: SPEECH_DEFAULTS.voice_variant,
      'x-order': 2,
    },
    speed: {
      type: 'integer',
      title: 'Speed',
      description: 'Speaking rate in words per minute.',
      minimum: SPEECH_MIN_WPM,
      maximum: SPEECH_MAX_WPM,
      default: SPEECH_DEFAULTS.speed,
      'x-order': 3,
    },
    pitch: {
      type: 'integer',
      title: 'Pitch',
      description: 'Pitch from 0 to 99; 50 is the voice’s normal pitch.',
      minimum: 0,
      maximum: 99,
      default: SPEECH_DEFAULTS.pitch,
      'x-order': 4,
    },
    output_format: {
      type: 'string',
      title: 'Output Format',
      description: 'mp3 (64 kb/s mono) or wav (16-bit PCM, 22,050 Hz mono).',
      enum: [...SPEECH_FORMATS],
      default: SPEECH_DEFAULTS.output_format,
      'x-order': 5,
    },
  },
};

const videoInput: JsonObject = {
  type: 'object',
  title: 'Input',
  required: ['prompt'],
  properties: {
    prompt: {
      type: 'string',
      title: 'Prompt',
      description: 'What to film. Colour and mood words steer the palette, as in local-image.',
      maxLength: PROMPT_MAX_CHARS,
      'x-order': 0,
    },
    duration: {
      type: 'integer',
      title: 'Duration',
      description: 'Length of the video in seconds.',
      enum: [...VIDEO_DURATIONS],
      default: VIDEO_DEFAULTS.duration,
      'x-order': 1,
    },
    seconds: {
      type: 'integer',
      title: 'Seconds',
      description: 'Another name for duration, as some video models call it; wins over duration when set.',
      enum: [...VIDEO_DURATIONS],
      'x-order': 2,
    },
    aspect_ratio: {
      type: 'string',
      title: 'Aspect Ratio',
      description: 'Aspect ratio of the video.',
      enum: [...VIDEO_ASPECT_RATIOS],
      default: VIDEO_DEFAULTS.aspect_ratio,
      'x-order': 3,
    },
    resolution: {
      type: 'string',
      title: 'Resolution',
      description: 'Length of the short side: 180p is 320x180 at 16:9. Larger takes longer.',
      enum: Object.keys(VIDEO_RESOLUTIONS),
      default: VIDEO_DEFAULTS.resolution,
      'x-order': 4,
    },
    seed: seedProperty(5),
  },
};

const SCHEMAS: Record<LocalMediaModel, { input: JsonObject; output: JsonObject }> = {
  'local-image': {
    input: imageInput,
    output: { type: 'array', title: 'Output', items: { type: 'string', format: 'uri' } },
  },
  'local-speech': { input: speechInput, output: uriOutput },
  'local-video': { input: videoInput, output: uriOutput },
};

/** A copy of the model's schemas (callers may annotate it), or undefined for a model that is not local. */
export function localMediaSchemas(model: string): { input: JsonObject; output: JsonObject } | undefined {
  return isLocalMediaModel(model) ? structuredClone(SCHEMAS[model]) : undefined;
}
