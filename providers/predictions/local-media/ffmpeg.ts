/**
 * Runs the ffmpeg binary that ships in the `@ffmpeg-installer/ffmpeg` npm package (a static build with
 * libx264 and libmp3lame), so the local media models need nothing from the OS.
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { abortError } from './abort.js';

let binaryPath: string | undefined;

/** The ffmpeg binary's path; throws a readable Error when the platform package is missing. */
export function ffmpegPath(): string {
  if (binaryPath) return binaryPath;
  try {
    // Loaded lazily: the installer package throws (a string) at import time on an unsupported platform,
    // which must fail a media prediction, not the gateway's start-up.
    const installer: unknown = createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg');
    const path = (installer as { path?: unknown }).path;
    if (typeof path !== 'string') throw new Error('no path');
    binaryPath = path;
    return path;
  } catch (err) {
    throw new Error(
      `ffmpeg is not available on this platform (${String(err instanceof Error ? err.message : err)})`,
    );
  }
}

export interface FfmpegOptions {
  args: readonly string[];
  signal?: AbortSignal;
  /** Written to ffmpeg's stdin, which is then closed. */
  input?: Uint8Array;
  /** When set, stdout is read as text lines (e.g. `-progress pipe:1`) instead of being collected. */
  onStdoutLine?: (line: string) => void;
}

export class FfmpegError extends Error {
  constructor(
    message: string,
    readonly exitCode: number | null,
  ) {
    super(message);
    this.name = 'FfmpegError';
  }
}

/** Keep the end of stderr only: with `-loglevel error` it is short, and the last line says what failed. */
const STDERR_KEEP = 4096;

/**
 * Runs ffmpeg to completion and resolves with its stdout (empty when onStdoutLine is used). An abort
 * kills ffmpeg with SIGKILL at once and rejects once the process is gone (so no zombie is left behind).
 */
export function runFfmpeg(options: FfmpegOptions): Promise<Buffer> {
  const { signal } = options;
  if (signal?.aborted) return Promise.reject(abortError(signal));
  return new Promise<Buffer>((resolve, reject) => {
    const child = spawn(ffmpegPath(), ['-hide_banner', '-nostdin', '-loglevel', 'error', ...options.args], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const stdout: Buffer[] = [];
    let stderr = '';
    let lineBuffer = '';
    let aborted = false;
    const onAbort = () => {
      aborted = true;
      child.kill('SIGKILL');
    };
    signal?.addEventListener('abort', onAbort, { once: true });

    child.stdout.on('data', (chunk: Buffer) => {
      if (!options.onStdoutLine) {
        stdout.push(chunk);
        return;
      }
      lineBuffer += chunk.toString('utf8');
      const lines = lineBuffer.split('\n');
      lineBuffer = lines.pop() ?? '';
      for (const line of lines) options.onStdoutLine(line.trimEnd());
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString('utf8')).slice(-STDERR_KEEP);
    });
    // ffmpeg may exit before it reads all input (a bad filter, a kill): the EPIPE is reported by the exit.
    child.stdin.on('error', () => {});
    child.stdin.end(options.input);

    child.once('error', (err) => {
      signal?.removeEventListener('abort', onAbort);
      reject(new FfmpegError(`ffmpeg could not start: ${err.message}`, null));
    });
    child.once('close', (code, killedBy) => {
      signal?.removeEventListener('abort', onAbort);
      if (aborted && signal) return reject(abortError(signal));
      if (code === 0) {
        if (lineBuffer && options.onStdoutLine) options.onStdoutLine(lineBuffer.trimEnd());
        return resolve(Buffer.concat(stdout));
      }
      const lastLine = stderr.trim().split('\n').pop() ?? '';
      const how = killedBy ? `was killed by ${killedBy}` : `exited with code ${code}`;
      reject(new FfmpegError(`ffmpeg ${how}${lastLine ? `: ${lastLine}` : ''}`, code));
    });
  });
}
