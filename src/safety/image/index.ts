/**
 * The offline image classifier (README, "Image outputs"): nsfwjs' MobileNetV2 model on TensorFlow.js'
 * WebAssembly backend, both shipped inside npm packages, run in a worker thread (thread.ts) started on
 * the first image and kept for the life of the process. It evaluates `sexual` only (mapping.ts).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Severity } from '../categories.js';
import { ClassifierUnavailable } from '../classifier.js';
import { DEFAULT_CUTOFFS, type ImageProbabilities, type SexualCutoffs, sexualSeverity } from './mapping.js';
import type { ImageReady, ImageRequest, ImageResponse } from './protocol.js';

/** The classifier's name in results, metrics and logs. */
export const IMAGE_CLASSIFIER = 'nsfwjs';

/** Content types the decoder reads (sharp, already a dependency for the local image models). */
const DECODABLE = new Set([
  'image/png',
  'image/jpeg',
  'image/jpg',
  'image/webp',
  'image/gif',
  'image/avif',
  'image/tiff',
]);

/** Loading the model (about a second, more on a busy machine) and one image, each at most this long. */
const LOAD_TIMEOUT_MS = 60_000;
const IMAGE_TIMEOUT_MS = 30_000;

export interface ImageFindings {
  sexual: Severity;
  /** The model's class probabilities, kept for the mapping's sake (never the image itself). */
  probabilities: ImageProbabilities;
}

/** Whether `classifyImage` reads this content type (`image/png; charset=…` included). */
export function isClassifiableImage(contentType: string): boolean {
  return DECODABLE.has(contentType.split(';')[0]?.trim().toLowerCase() ?? '');
}

let shared: ImageClassifier | undefined;

/**
 * Classifies one image file: undefined for a content type that is not a decodable image; throws
 * ClassifierUnavailable when the image cannot be decoded or the model cannot run (the caller fails open).
 * `cutoffs`: the instance's `safety.image` (config/safety.ts). The thread answers the model's
 * probabilities only, so one thread serves every instance in the process, whatever their cut-offs.
 */
export async function classifyImage(
  bytes: Uint8Array,
  contentType: string,
  cutoffs: Readonly<SexualCutoffs> = DEFAULT_CUTOFFS,
): Promise<ImageFindings | undefined> {
  if (!isClassifiableImage(contentType)) return undefined;
  shared ??= new ImageClassifier();
  const probabilities = await shared.classify(bytes);
  return { sexual: sexualSeverity(probabilities, cutoffs), probabilities };
}

interface Thread {
  worker: Worker;
  /** Settles once the model is loaded (or could not be). */
  ready: Promise<void>;
  refuse: (error: Error) => void;
}

interface Waiting {
  resolve: (probabilities: ImageProbabilities) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * One worker thread holding the model. A thread that dies, fails to load the model or overruns a
 * timeout fails the calls in flight (and is terminated); the next call starts a new one.
 */
class ImageClassifier {
  private thread: Thread | undefined;
  private nextId = 1;
  private readonly waiting = new Map<number, Waiting>();

  async classify(bytes: Uint8Array): Promise<ImageProbabilities> {
    this.thread ??= this.start();
    const thread = this.thread;
    await thread.ready;
    if (this.thread !== thread)
      throw new ClassifierUnavailable(IMAGE_CLASSIFIER, 'the classifier thread ended');
    const id = this.nextId++;
    // A copy the thread owns: `bytes` may be a slice of a pooled buffer the caller goes on using.
    const data = new Uint8Array(bytes);
    return new Promise<ImageProbabilities>((resolve, reject) => {
      const timer = setTimeout(() => {
        // A thread that overran is stuck: ended, with every call on it.
        this.fail(thread.worker, `no answer within ${IMAGE_TIMEOUT_MS} ms`);
        if (this.waiting.delete(id)) reject(new ClassifierUnavailable(IMAGE_CLASSIFIER, 'no answer'));
      }, IMAGE_TIMEOUT_MS);
      this.waiting.set(id, { resolve, reject, timer });
      thread.worker.postMessage({ id, data } satisfies ImageRequest, [data.buffer]);
    });
  }

  private start(): Thread {
    const worker = startThread();
    let loaded: () => void = () => {};
    let refuse: (error: Error) => void = () => {};
    const ready = new Promise<void>((resolve, reject) => {
      loaded = resolve;
      refuse = reject;
    });
    const loadTimer = setTimeout(
      () => this.fail(worker, `the model did not load within ${LOAD_TIMEOUT_MS} ms`),
      LOAD_TIMEOUT_MS,
    );
    worker.on('message', (message: ImageResponse | ImageReady) => {
      if ('ready' in message) {
        clearTimeout(loadTimer);
        if (message.ready) loaded();
        else this.fail(worker, `the model did not load: ${message.message}`);
        return;
      }
      const waiting = this.waiting.get(message.id);
      if (!waiting) return;
      this.waiting.delete(message.id);
      clearTimeout(waiting.timer);
      if (message.ok) {
        waiting.resolve(message.probabilities);
      } else {
        const what = message.reason === 'decode' ? 'the image could not be decoded' : 'the model failed';
        waiting.reject(new ClassifierUnavailable(IMAGE_CLASSIFIER, `${what}: ${message.message}`));
      }
    });
    worker.on('error', (error) => this.fail(worker, `the classifier thread failed: ${error.message}`));
    worker.once('exit', (code) => {
      clearTimeout(loadTimer);
      this.fail(worker, `the classifier thread exited (code ${code})`);
    });
    // The thread never keeps the process alive (after the listeners: adding one refs the port again).
    worker.unref();
    // Calls waiting for the model learn of a failure through `ready`; a rejection nobody awaits is fine.
    ready.catch(() => undefined);
    return { worker, ready, refuse };
  }

  /** Ends `worker` (if it is still this classifier's) and fails every call on it. */
  private fail(worker: Worker, message: string): void {
    const thread = this.thread;
    if (thread?.worker !== worker) return;
    this.thread = undefined;
    const error = new ClassifierUnavailable(IMAGE_CLASSIFIER, message);
    thread.refuse(error);
    for (const waiting of this.waiting.values()) {
      clearTimeout(waiting.timer);
      waiting.reject(error);
    }
    this.waiting.clear();
    void worker.terminate().catch(() => undefined);
  }
}

/** Starts the compiled thread next to this file, or (tests run the sources) the TypeScript one via tsx. */
function startThread(): Worker {
  const js = new URL('./thread.js', import.meta.url);
  if (existsSync(fileURLToPath(js))) return new Worker(js);
  // A worker ignores --import in execArgv on Node 20, so it registers tsx's loader itself (as the
  // ledger thread does, usage/ledger-thread.ts).
  const entry = new URL('./thread.ts', import.meta.url).href;
  const api = createRequire(import.meta.url)
    .resolve('tsx/esm/api')
    .replace(/\.cjs$/, '.mjs');
  const boot = `import(${JSON.stringify(pathToFileURL(api).href)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry)}); })`;
  return new Worker(boot, { eval: true });
}
