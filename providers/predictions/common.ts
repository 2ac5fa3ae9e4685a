/**
 * What the Cog and Replicate backends both need, in one place so they cannot drift apart: data: URI
 * files and their extensions, progress read from a model's logs, and the wait that gives up when the
 * run's signal aborts.
 */
import { BackendError, type FileOutput, type JsonObject } from './types.js';

export function isObject(value: unknown): value is JsonObject {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

// ---- files ----

/** `data:[<type>][;param...][;base64],<data>` (RFC 2397); undefined when malformed. */
export function parseDataUri(uri: string): { data: Buffer; contentType: string } | undefined {
  if (!uri.startsWith('data:')) return undefined;
  const comma = uri.indexOf(',');
  if (comma < 0) return undefined;
  const meta = uri.slice('data:'.length, comma).split(';');
  const base64 = meta.at(-1)?.trim().toLowerCase() === 'base64';
  // RFC 2397: an empty type means text/plain.
  const contentType = (meta[0] ?? '').trim().toLowerCase() || 'text/plain';
  const payload = uri.slice(comma + 1);
  try {
    const data = base64 ? Buffer.from(payload, 'base64') : Buffer.from(decodeURIComponent(payload), 'utf8');
    return { data, contentType };
  } catch {
    return undefined;
  }
}

/**
 * One extension per type. `image/jpeg` is `.jpg`: the name Cog's own file outputs and Replicate's delivery
 * URLs use, and the one the API's `output_format` values (`jpg`, `png`, `webp`) name, so a caller asking
 * for `jpg` gets `output_0.jpg`.
 */
const EXTENSIONS: Readonly<Record<string, string>> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/jpg': 'jpg',
  'image/webp': 'webp',
  'image/gif': 'gif',
  'image/svg+xml': 'svg',
  'image/avif': 'avif',
  'image/tiff': 'tiff',
  'video/mp4': 'mp4',
  'video/webm': 'webm',
  'video/quicktime': 'mov',
  'audio/wav': 'wav',
  'audio/x-wav': 'wav',
  'audio/wave': 'wav',
  'audio/mpeg': 'mp3',
  'audio/mp3': 'mp3',
  'audio/ogg': 'ogg',
  'audio/flac': 'flac',
  'application/json': 'json',
  'application/zip': 'zip',
  'text/plain': 'txt',
  'model/gltf-binary': 'glb',
};

/** The file extension (without the dot) for a MIME type; `bin` for one without a known name. */
export function extensionFor(contentType: string): string {
  const type = contentType.split(';')[0]?.trim().toLowerCase() ?? '';
  return EXTENSIONS[type] ?? 'bin';
}

/** A data: URI output as the bytes of file number `index` (`output_<index>.<ext>`); undefined when malformed. */
export function dataUriFile(uri: string, index: number): FileOutput | undefined {
  const file = parseDataUri(uri);
  if (!file) return undefined;
  return { kind: 'bytes', ...file, name: `output_${index}.${extensionFor(file.contentType)}` };
}

/** An absolute http(s) URL without spaces. */
export function isHttpUrl(value: string): boolean {
  return /^https?:\/\/\S+$/i.test(value) && URL.canParse(value);
}

// ---- progress ----

/**
 * The last percentage in log text: a tqdm bar (` 45%|████`) or a line ending in one (`progress: 45.5%`);
 * undefined when there is none.
 */
export function lastPercentage(text: string): number | undefined {
  let found: number | undefined;
  for (const match of text.matchAll(/(\d{1,3}(?:\.\d+)?)%(?=\||[ \t]*(?:[\r\n]|$))/g)) {
    const value = Number(match[1]);
    if (value >= 0 && value <= 100) found = value;
  }
  return found;
}

/**
 * Turns new log text into `log` and `progress` events; a percentage is reported only when it moved.
 * One per run.
 */
export class LogProgress {
  private last: number | undefined;

  constructor(private readonly events: { log(text: string): void; progress(percent: number): void }) {}

  report(text: string): void {
    if (text === '') return;
    this.events.log(text);
    const percent = lastPercentage(text);
    if (percent !== undefined && percent !== this.last) {
      this.last = percent;
      this.events.progress(percent);
    }
  }
}

// ---- aborts ----

/** What a run rejects with when its caller aborted it; the signal's reason is the cause. */
export function canceledError(signal: AbortSignal): BackendError {
  return new BackendError('the prediction was canceled', { retryable: false, cause: signal.reason });
}

/**
 * `promise`, or a rejection with `reason()` (the signal's reason by default) as soon as `signal` aborts;
 * `promise` is left to settle on its own.
 */
export function raceAbort<T>(
  promise: Promise<T>,
  signal: AbortSignal,
  reason: () => unknown = () => signal.reason,
): Promise<T> {
  if (signal.aborted) return Promise.reject(reason());
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(reason());
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}
