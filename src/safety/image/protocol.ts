/** Messages between the image classifier's thread (thread.ts) and the process that uses it (index.ts). */
import type { ImageProbabilities } from './mapping.js';

export interface ImageRequest {
  id: number;
  /** The image file's bytes (PNG, JPEG, WebP, GIF, AVIF, TIFF), transferred to the thread. */
  data: Uint8Array;
}

export type ImageResponse =
  | { id: number; ok: true; probabilities: ImageProbabilities }
  /** `decode`: the bytes are not an image the decoder reads; `model`: the model failed on it. */
  | { id: number; ok: false; reason: 'decode' | 'model'; message: string };

/** Sent once by the thread: the model is loaded (with how long it took), or it could not be. */
export type ImageReady = { ready: true; loadMs: number } | { ready: false; message: string };
