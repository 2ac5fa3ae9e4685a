/**
 * The `local-speech` generator: text to speech with eSpeak NG compiled to WebAssembly (npm `espeak-ng`,
 * voices and dictionaries embedded, nothing fetched), encoded to MP3 by the bundled ffmpeg.
 *
 * eSpeak runs as a command-line program inside the WASM module and blocks its thread for ~200 ms or more
 * per call, so each synthesis runs in its own worker thread: the gateway's event loop stays free, and an
 * abort terminates the worker mid-sentence.
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { abortError } from './abort.js';
import { runFfmpeg } from './ffmpeg.js';

/** A selection of eSpeak NG's languages that read well; eSpeak itself has about 130. */
export const SPEECH_VOICES = [
  'en-us',
  'en-gb',
  'en-gb-x-rp',
  'en-gb-scotland',
  'en-029',
  'fr-fr',
  'de',
  'es',
  'es-419',
  'it',
  'pt',
  'pt-br',
  'nl',
  'sv',
  'da',
  'nb',
  'fi',
  'pl',
  'cs',
  'ru',
  'uk',
  'el',
  'tr',
  'ar',
  'he',
  'hi',
  'ja',
  'ko',
  'cmn',
  'yue',
  'vi',
  'id',
] as const;
export type SpeechVoice = (typeof SPEECH_VOICES)[number];

/** eSpeak voice variants (timbre); `default` is the language's own. */
export const SPEECH_VARIANTS = [
  'default',
  'm1',
  'm2',
  'm3',
  'm4',
  'm5',
  'm6',
  'm7',
  'f1',
  'f2',
  'f3',
  'f4',
  'f5',
  'croak',
  'whisper',
] as const;
export type SpeechVariant = (typeof SPEECH_VARIANTS)[number];

export const SPEECH_FORMATS = ['mp3', 'wav'] as const;
export type SpeechFormat = (typeof SPEECH_FORMATS)[number];

export const SPEECH_CONTENT_TYPES: Record<SpeechFormat, string> = { mp3: 'audio/mpeg', wav: 'audio/wav' };

export const SPEECH_MIN_WPM = 80;
export const SPEECH_MAX_WPM = 450;
/** Bounds one job's work: about six minutes of speech at the default rate. */
export const SPEECH_MAX_CHARS = 5000;

export interface SpeechRequest {
  text: string;
  voice: SpeechVoice;
  variant: SpeechVariant;
  /** Words per minute, 80-450. */
  wordsPerMinute: number;
  /** 0-99, 50 is the voice's normal pitch. */
  pitch: number;
  format: SpeechFormat;
}

const requireHere = createRequire(import.meta.url);

/**
 * The worker's program, plain CommonJS evaluated by `new Worker(code, { eval: true })`: a separate worker
 * file would need a different path under vitest (.ts) and the build (.js). The text goes in through the
 * WASM file system, never through argv, so a prompt that starts with `-` cannot become an option.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
(async () => {
  const { default: createESpeak } = await import(workerData.moduleUrl);
  const messages = [];
  const espeak = await createESpeak({
    arguments: workerData.args,
    preRun: [(module) => module.FS.writeFile('/input.txt', workerData.text)],
    instantiateWasm: (imports, done) => {
      WebAssembly.instantiate(workerData.wasmModule, imports).then((instance) => done(instance));
      return {};
    },
    print: (line) => messages.push(line),
    printErr: (line) => messages.push(line),
  });
  let wav = null;
  try {
    wav = espeak.FS.readFile('/output.wav');
  } catch {}
  if (wav && wav.length > 44) parentPort.postMessage({ wav }, [wav.buffer]);
  else parentPort.postMessage({ error: messages.find((line) => /error/i.test(line)) || messages[0] || 'no audio was produced' });
})().catch((err) => parentPort.postMessage({ error: String((err && err.message) || err) }));
`;

interface WorkerReply {
  wav?: Uint8Array;
  error?: string;
}

let compiledModule: Promise<WebAssembly.Module> | undefined;

/** eSpeak's WASM (18 MB) is compiled once per process and shared with every worker. */
function espeakModule(): Promise<WebAssembly.Module> {
  if (!compiledModule) {
    const wasmPath = requireHere.resolve('espeak-ng').replace(/\.js$/, '.wasm');
    compiledModule = readFile(wasmPath).then((bytes) => WebAssembly.compile(bytes));
    // A failed compile (a damaged install) is tried again by the next job rather than cached.
    compiledModule.catch(() => {
      compiledModule = undefined;
    });
  }
  return compiledModule;
}

function espeakArguments(request: SpeechRequest): string[] {
  const voice = request.variant === 'default' ? request.voice : `${request.voice}+${request.variant}`;
  const wpm = Math.round(Math.min(SPEECH_MAX_WPM, Math.max(SPEECH_MIN_WPM, request.wordsPerMinute)));
  const pitch = Math.round(Math.min(99, Math.max(0, request.pitch)));
  return [
    ...['-v', voice, '-s', String(wpm), '-p', String(pitch)],
    // UTF-8 text from the file the worker writes, speech to a WAV file the worker reads back.
    ...['-b', '1', '-f', '/input.txt', '-w', '/output.wav'],
  ];
}

/** Speech as a 16-bit mono PCM WAV at 22,050 Hz. */
export async function synthesizeWav(request: SpeechRequest, signal?: AbortSignal): Promise<Buffer> {
  if (request.text.length > SPEECH_MAX_CHARS) {
    throw new RangeError(`the text is longer than ${SPEECH_MAX_CHARS} characters`);
  }
  const wasmModule = await espeakModule();
  if (signal?.aborted) throw abortError(signal);
  const worker = new Worker(WORKER_SOURCE, {
    eval: true,
    workerData: {
      moduleUrl: pathToFileURL(requireHere.resolve('espeak-ng')).href,
      wasmModule,
      args: espeakArguments(request),
      text: request.text,
    },
  });
  return new Promise<Buffer>((resolve, reject) => {
    let settled = false;
    const finish = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      // The worker is done either way; terminate() also stops a synthesis that is still running.
      void worker.terminate().finally(outcome);
    };
    const onAbort = () => finish(() => reject(abortError(signal!)));
    signal?.addEventListener('abort', onAbort, { once: true });
    worker.once('message', (reply: WorkerReply) => {
      if (reply.wav) {
        const wav = reply.wav;
        finish(() => resolve(Buffer.from(wav.buffer, wav.byteOffset, wav.byteLength)));
      } else finish(() => reject(new Error(`eSpeak NG: ${reply.error ?? 'unknown error'}`)));
    });
    worker.once('error', (err) => finish(() => reject(new Error(`eSpeak NG: ${err.message}`))));
    worker.once('exit', (code) => finish(() => reject(new Error(`eSpeak NG stopped (exit code ${code})`))));
  });
}

/** WAV to MP3 (mono, 64 kb/s CBR): no ID3 tag, no encoder tag, so the same WAV gives the same bytes. */
export function encodeMp3(wav: Uint8Array, signal?: AbortSignal): Promise<Buffer> {
  return runFfmpeg({
    args: [
      ...['-f', 'wav', '-i', 'pipe:0'],
      ...['-map_metadata', '-1', '-fflags', '+bitexact', '-flags:a', '+bitexact'],
      ...['-c:a', 'libmp3lame', '-b:a', '64k', '-ac', '1'],
      ...['-id3v2_version', '0', '-write_id3v1', '0', '-f', 'mp3', 'pipe:1'],
    ],
    input: wav,
    signal,
  });
}

/** Speech for the request, as WAV or MP3 bytes. */
export async function generateSpeech(request: SpeechRequest, signal?: AbortSignal): Promise<Buffer> {
  const wav = await synthesizeWav(request, signal);
  return request.format === 'wav' ? wav : encodeMp3(wav, signal);
}
