import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import sharp from 'sharp';
import { mediaBackendFor } from '../../providers/predictions/index.js';
import {
  BackendError,
  type BackendOutput,
  type BackendResult,
  type FileOutput,
  type ShapedOutput,
} from '../../providers/predictions/types.js';
import type { InferenceProvider } from '../../providers/types.js';
import { nextDelayMs } from '../backoff.js';
import { newSafetyOutcome, recordCheck } from '../safety/engine.js';
import { IMAGE_CLASSIFIER, isClassifiableImage } from '../safety/image/index.js';
import { checkImageOutputs, type ImageOutput, type ImageOutputCheck } from '../safety/image/outputs.js';
import type { SafetyPolicy } from '../safety/policy.js';
import { extendPrediction } from './admission.js';
import type { PredictionDeps } from './context.js';
import { OutputDownloads } from './downloads.js';
import { InputFetcher } from './input-fetch.js';
import { emitStream, finish, markProcessing } from './lifecycle.js';
import { openSecrets } from './secrets.js';
import type { PredictionSafety, StoredFile, StoredOutput } from './types.js';
import { isTerminal, type JobInfo, type PredictionRecord } from './types.js';

/** Output URLs are the backend's choice: downloaded behind the webhooks' SSRF guard (downloads.ts). */
const downloads = new OutputDownloads();
/** URL file inputs are the caller's choice: fetched by Gantry behind the same guard (input-fetch.ts). */
const inputFiles = new InputFetcher();

/** Log text is flushed to the store at most this often (a chatty model would otherwise write per line). */
const LOG_FLUSH_MS = 250;
/** How long a run's outcome is retried through a store outage before the job goes back to the queue. */
const STORE_RETRY_MS = 5 * 60_000;
const STORE_BACKOFF = { baseMs: 200, maxMs: 5_000 };
/** The error of a prediction whose image output the `block` policy stopped (README, "Image outputs"). */
const OUTPUT_FILTERED = 'output filtered by the content policy';
/** Cancel-After deadline jobs run at once (each is a read and a write). */
const DEADLINE_CONCURRENCY = 4;

/** The prediction store stayed unreachable for STORE_RETRY_MS. */
class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`prediction store unreachable: ${(cause as Error).message}`, { cause });
  }
}

/**
 * Runs prediction jobs: one backend call per attempt, outputs copied into Gantry's file store, the
 * status moved in the store (which decides races with cancel), and the side effects in lifecycle.ts.
 * A job handler that throws makes the queue retry it; it throws only for retryable failures with
 * attempts left, so a job never ends stuck in a non-terminal state.
 */
export class PredictionWorker {
  private readonly running = new Map<string, { controller: AbortController; done: Promise<unknown> }>();

  constructor(private readonly deps: PredictionDeps) {}

  start(): void {
    this.deps.queue.process('prediction', (job) => this.run(job), {
      concurrency: this.deps.config.predictions.concurrency,
    });
    // A lane of its own: a deadline is kept while every prediction slot is busy.
    this.deps.queue.process('deadline', (job) => this.cancelAtDeadline(job.id), {
      concurrency: DEADLINE_CONCURRENCY,
    });
  }

  /**
   * Cancel-After: the deadline job queued with the prediction (service.ts) cancels it, queued or running,
   * as a cancel request would. Only from `starting`/`processing` (lifecycle.ts finish): an outcome that
   * landed first is kept. A job that comes early (a re-added one) schedules itself for the rest.
   */
  async cancelAtDeadline(id: string): Promise<void> {
    const { deps } = this;
    const record = await deps.store.get(id);
    if (!record || isTerminal(record.status) || record.cancelAt === undefined) return;
    const left = record.cancelAt - Date.now();
    if (left > 0) {
      await deps.queue.add('deadline', id, { delayMs: left });
      return;
    }
    const canceled = await finish(deps, id, 'canceled', {}, randomUUID());
    if (!canceled) return;
    // The worker running it (on whichever instance) stops its backend; one that misses this finds the
    // prediction canceled when it finishes and drops its result.
    await deps.bus
      .publish(id, { type: 'cancel' })
      .catch((e: Error) => deps.log.warn({ err: e.message, prediction: id }, 'Cancel-After not announced'));
  }

  /**
   * Shutdown past its grace: aborts every running backend call (their predictions go back to the queue)
   * and waits up to `settleMs` for the runs to write that down.
   */
  async abortAll(settleMs = 2_000): Promise<void> {
    const runs = [...this.running.values()];
    for (const run of runs) run.controller.abort(new Error('worker shutting down'));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(runs.map((r) => r.done)),
      new Promise((resolve) => {
        timer = setTimeout(resolve, settleMs);
      }),
    ]);
    clearTimeout(timer);
  }

  async run(job: JobInfo): Promise<void> {
    // A sweep may queue an id this process is running (a synchronous backend stays `starting`).
    if (this.running.has(job.id)) return;
    const controller = new AbortController();
    let settle: () => void = () => {};
    this.running.set(job.id, { controller, done: new Promise<void>((resolve) => (settle = resolve)) });
    try {
      await this.attempt(job.id, controller);
    } finally {
      this.running.delete(job.id);
      settle();
    }
  }

  /**
   * One run of a prediction. Up to the backend call, a store or bus error throws as it is: the job goes
   * back to the queue and, unless the attempts write itself was applied with its answer lost, no run is
   * counted. From the backend call on, an outcome is written through persist().
   */
  private async attempt(id: string, controller: AbortController): Promise<void> {
    const { deps } = this;
    // The terminal write of this run carries it (lifecycle.ts finish): a retried finish knows its own.
    const token = randomUUID();
    let canceled = false;
    // Subscribed before the read: a cancel that lands after the read still stops the backend.
    const unsubscribe = await deps.bus.subscribe(id, (message) => {
      if (message.type === 'cancel') {
        canceled = true;
        controller.abort(new Error('canceled'));
      }
    });
    try {
      const current = await deps.store.get(id);
      if (!current || isTerminal(current.status)) return;
      // Cancel-After: past its deadline a prediction ends canceled without running. Before it, the
      // deadline job (cancelAtDeadline) cancels it when the time comes, running or still queued.
      if (current.cancelAt !== undefined) {
        if (Date.now() >= current.cancelAt) {
          await this.persist(id, () => finish(deps, id, 'canceled', {}, token));
          return;
        }
        // A no-op while the job created with the prediction waits; one lost on the way comes back here.
        await deps.queue
          .add('deadline', id, { delayMs: current.cancelAt - Date.now() })
          .catch((e: Error) => deps.log.warn({ err: e.message, prediction: id }, 'Cancel-After not queued'));
      }
      const maxAttempts = deps.config.predictions.maxAttempts;
      if (current.attempts >= maxAttempts) {
        const error = `The prediction's worker stopped ${current.attempts} times before it finished`;
        await this.persist(id, () => finish(deps, id, 'failed', { error }, token));
        return;
      }
      const record = await deps.store.update(id, { attempts: current.attempts + 1 });
      if (!record) return;
      await this.runBackend(record, controller, token, () => canceled);
    } finally {
      unsubscribe();
    }
  }

  private async runBackend(
    record: PredictionRecord,
    controller: AbortController,
    token: string,
    canceledByCaller: () => boolean,
  ): Promise<void> {
    const { deps } = this;
    const maxAttempts = deps.config.predictions.maxAttempts;
    const logs = new LogBuffer(deps, record);
    const started = performance.now();
    const keepSlot = setInterval(
      () => void extendPrediction(deps, record.lease).catch(() => undefined),
      Math.max(1_000, Math.floor((record.lease?.leaseMs ?? 60_000) / 3)),
    );
    keepSlot.unref();
    // The text pieces the stream's output events carried, to tell whether they add up to the output.
    const streamed = { text: '' };
    try {
      const result = await this.callBackend(record, controller.signal, logs, streamed);
      // The logs also go into the final write below: a flush lost to a store outage costs nothing.
      await logs.flush().catch(() => undefined);
      const predictTime = result.predictTime ?? (performance.now() - started) / 1000;
      // Image outputs are kept for the safety check only when the prediction's policy runs one.
      const policy = this.outputPolicy(record);
      const images: ImageOutput[] | undefined = policy ? [] : undefined;
      const stored = result.output
        ? await this.storeShaped(record, result.output, streamed.text, images)
        : await this.storeOutputs(record, result.outputs, images);
      const checked =
        policy && images && images.length > 0
          ? await this.checkOutputs(record.id, policy, images)
          : undefined;
      const safety: { safety?: PredictionSafety } = checked
        ? { safety: { ...(record.safety as PredictionSafety), output: { ...checked.results } } }
        : {};
      if (checked?.check.blocked) {
        // Never served: the files go before the prediction fails, so no link to them is ever given.
        await deps.blobs.deletePrefix(record.id);
        await this.persist(record.id, () =>
          finish(
            deps,
            record.id,
            'failed',
            { error: OUTPUT_FILTERED, predictTime, logs: result.logs || logs.text(), ...safety },
            token,
          ),
        );
        return;
      }
      const finished = await this.persist(record.id, () =>
        finish(
          deps,
          record.id,
          'succeeded',
          {
            files: stored.files,
            outputText: stored.text,
            ...(stored.output ? { output: stored.output } : {}),
            predictTime,
            megapixels: stored.megapixels,
            progress: record.progress === null ? null : 100,
            logs: result.logs || logs.text(),
            ...safety,
          },
          token,
        ),
      );
      if (!finished) {
        // Canceled or deleted while the outputs were being stored: they belong to nobody. A success
        // is another run's, with the same files: kept.
        const latest = await this.persist(record.id, () => deps.store.get(record.id));
        if (latest?.status !== 'succeeded') await deps.blobs.deletePrefix(record.id);
        return;
      }
    } catch (error) {
      await logs.flush().catch(() => {});
      // The store stayed away past the retry cap: the job goes back to the queue, the prediction stays
      // as the store has it (a store error is never the backend's failure).
      if (error instanceof StoreUnavailableError) throw error;
      if (canceledByCaller()) {
        // Outputs stored before the cancel landed belong to nobody.
        await deps.blobs.deletePrefix(record.id).catch(() => undefined);
        return;
      }
      if (controller.signal.aborted) {
        // This worker is shutting down: the prediction goes back to the queue (the store, in embedded
        // mode), and the interrupted run does not count as one of its attempts.
        await deps.store.update(record.id, { status: 'starting', attempts: record.attempts - 1 });
        throw error;
      }
      if (error instanceof BackendError && error.retryable && record.attempts < maxAttempts) {
        // The retry continues this run: a prediction already `processing` (a synchronous Cog whose
        // connection broke after the request was sent) stays so, with its started_at and the one
        // `prediction.started` webhook (markProcessing moves only a `starting` one).
        throw error;
      }
      if (!(error instanceof BackendError)) {
        deps.log.error({ err: error, prediction: record.id }, 'prediction failed unexpectedly');
      }
      await this.persist(record.id, () =>
        finish(deps, record.id, 'failed', { error: failureMessage(error) }, token),
      );
    } finally {
      clearInterval(keepSlot);
    }
  }

  /**
   * A store write that must not be lost (the outcome of a run that already happened): retried with
   * backoff through a store outage, up to STORE_RETRY_MS, then StoreUnavailableError.
   */
  private async persist<T>(id: string, write: () => Promise<T>): Promise<T> {
    const giveUpAt = Date.now() + STORE_RETRY_MS;
    for (let attempt = 1; ; attempt++) {
      try {
        return await write();
      } catch (error) {
        if (Date.now() >= giveUpAt) throw new StoreUnavailableError(error);
        if (attempt === 1) {
          this.deps.log.warn(
            { err: (error as Error).message, prediction: id },
            'prediction store write failed; retrying until the store is back',
          );
        }
        await sleep(nextDelayMs(attempt, STORE_BACKOFF));
      }
    }
  }

  private async callBackend(
    record: PredictionRecord,
    signal: AbortSignal,
    logs: LogBuffer,
    streamed: { text: string },
  ): Promise<BackendResult> {
    const { deps } = this;
    const entry = deps.catalog.entry(record.model);
    const route = entry?.routes[0];
    if (!entry || !route) throw new BackendError(`Model ${record.model} is no longer in the catalog`);
    const outputSchema = entry.output_schema;
    const input = openSecrets(record.input, record.sealedSecrets, deps.secretKey);
    // One transition, awaited before the result is returned, so `prediction.started` is recorded
    // before the terminal event (webhooks go out in that order).
    let processing: Promise<unknown> | undefined;
    const toProcessing = () => {
      processing ??= this.persist(record.id, () => markProcessing(deps, record.id)).catch((error: Error) =>
        deps.log.warn({ err: error.message, prediction: record.id }, 'processing status not recorded'),
      );
      return processing;
    };
    const bestEffort = (work: Promise<unknown>) =>
      void work.catch((error: Error) =>
        deps.log.warn({ err: error.message, prediction: record.id }, 'prediction progress not recorded'),
      );

    const backend = mediaBackendFor(deps.backends, route.provider, route.model);
    if (!backend) {
      const provider = deps.inference.get(route.provider);
      if (!provider) throw new BackendError(`No backend named ${route.provider}`);
      await toProcessing();
      return runTextModel(provider, route.model, input, record, signal, (piece) => {
        streamed.text += piece;
        bestEffort(emitStream(deps, record.id, 'output', piece));
      });
    }
    // A file input that cannot be fetched fails the prediction here, before the backend is called.
    const sent = await inputFiles.inline(
      input,
      deps.validators.get(record.model)?.fileFields ?? [],
      {
        maxBytes: deps.config.predictions.maxInputFileBytes,
        allowPrivate: deps.config.predictions.webhooks.allowPrivate,
      },
      signal,
    );
    let progressWritten = 0;
    return backend
      .run(
        {
          predictionId: record.id,
          model: route.model,
          input: sent,
          stream: record.stream,
          ...(outputSchema ? { outputSchema } : {}),
        },
        {
          signal,
          events: {
            processing: () => void toProcessing(),
            log: (text) => logs.add(text),
            progress: (percent) => {
              const now = Date.now();
              if (now - progressWritten < LOG_FLUSH_MS && percent < 100) return;
              progressWritten = now;
              bestEffort(deps.store.update(record.id, { progress: Math.max(0, Math.min(100, percent)) }));
            },
            output: (piece) => {
              if (!record.stream) return;
              streamed.text += piece;
              bestEffort(emitStream(deps, record.id, 'output', piece));
            },
          },
        },
      )
      .then(
        async (result) => {
          await toProcessing();
          return result;
        },
        async (error: unknown) => {
          // A `processing` write still on its way (a synchronous Cog reports it when the request is sent)
          // lands before the failure is handled, so a retry's reset to `starting` comes after it.
          await processing;
          throw error;
        },
      );
  }

  /**
   * The policy the prediction's outputs are checked under: the one its prompt check recorded at create
   * (`safety.policy`, absent when the policy was off), unless it is off.
   */
  private outputPolicy(record: PredictionRecord): SafetyPolicy | undefined {
    const name = record.safety?.policy;
    if (name === undefined) return undefined;
    const policy = this.deps.config.safety.table.policies.get(name);
    return policy?.mode === 'off' ? undefined : policy;
  }

  /** The image outputs' check (README, "Image outputs"), counted in the safety metrics. */
  private async checkOutputs(
    id: string,
    policy: SafetyPolicy,
    images: ImageOutput[],
  ): Promise<ImageOutputCheck> {
    const started = performance.now();
    const checked = await checkImageOutputs(policy, images, this.deps.config.safety.imageCutoffs);
    const seconds = (performance.now() - started) / 1000;
    const failed = checked.results.files.filter((f) => 'error' in f.content_filter_results).length;
    if (failed > 0) {
      // The classifier's reason only (never anything of the image): the check failed open for these.
      const reason = checked.results.files.find((f) => 'error' in f.content_filter_results);
      this.deps.log.warn(
        {
          prediction: id,
          classifier: IMAGE_CLASSIFIER,
          images: images.length,
          failed,
          results: reason?.content_filter_results,
        },
        'image outputs not checked',
      );
    }
    recordCheck(
      this.deps.metrics,
      newSafetyOutcome(),
      'predictions',
      'completion',
      IMAGE_CLASSIFIER,
      checked.check,
      seconds,
    );
    return checked;
  }

  /** Whether the prediction's provider may hand out output URLs on private addresses (its own origin's). */
  private allowPrivateOutputs(record: PredictionRecord): boolean {
    const provider = this.deps.catalog.entry(record.model)?.routes[0]?.provider;
    return this.deps.config.providers.find((p) => p.name === provider)?.allowPrivateOutputs === true;
  }

  /** Files and texts of a built-in or text model: the texts joined, the files listed. */
  private async storeOutputs(
    record: PredictionRecord,
    outputs: BackendOutput[],
    images: ImageOutput[] | undefined,
  ): Promise<StoredOutputs> {
    const files: StoredFile[] = [];
    const texts: string[] = [];
    const used = new Set<string>();
    let megapixels = 0;
    for (const [index, output] of outputs.entries()) {
      if (output.kind === 'text') {
        texts.push(output.text);
        continue;
      }
      const stored = await this.storeFile(record, output, index, used, images);
      files.push(stored.file);
      megapixels += stored.megapixels;
    }
    return {
      files,
      text: texts.length > 0 && files.length === 0 ? texts.join('') : null,
      megapixels: record.modelType === 'image' ? Math.round(megapixels * 1e6) / 1e6 : null,
    };
  }

  /** An output in the model's shape: every file in it stored, its place kept for the signed link. */
  private async storeShaped(
    record: PredictionRecord,
    shaped: ShapedOutput,
    streamedText: string,
    images: ImageOutput[] | undefined,
  ): Promise<StoredOutputs> {
    const files: StoredFile[] = [];
    const links: StoredOutput['links'] = [];
    const used = new Set<string>();
    let megapixels = 0;
    for (const [index, { path, file }] of shaped.files.entries()) {
      const stored = await this.storeFile(record, file, index, used, images);
      files.push(stored.file);
      links.push({ path, key: stored.file.key });
      megapixels += stored.megapixels;
    }
    // The stream's pieces of a concatenated text add up to it: what they have not carried is sent last.
    const text = record.stream && shaped.text && typeof shaped.value === 'string' ? shaped.value : undefined;
    const streamRest =
      text === undefined ? undefined : text.startsWith(streamedText) ? text.slice(streamedText.length) : text;
    return {
      files,
      text: null,
      output: { value: shaped.value, links, ...(streamRest === undefined ? {} : { streamRest }) },
      megapixels: record.modelType === 'image' ? Math.round(megapixels * 1e6) / 1e6 : null,
    };
  }

  /**
   * Copies one file (bytes, or a URL downloaded behind the SSRF guard) into the blob store. `used` holds
   * the names taken so far: two URLs ending in the same name (`…/a/out.png`, `…/b/out.png`) get two files.
   * An image is added to `images` (when given) for the output check.
   */
  private async storeFile(
    record: PredictionRecord,
    output: FileOutput,
    index: number,
    used: Set<string>,
    images?: ImageOutput[],
  ): Promise<{ file: StoredFile; megapixels: number }> {
    const file =
      output.kind === 'bytes'
        ? output
        : await downloads.download(
            output.url,
            output.headers ?? {},
            index,
            output.ownOrigin === true && this.allowPrivateOutputs(record),
          );
    let name = safeName(file.name, index);
    if (used.has(name)) name = `${index}_${name}`.slice(0, 100);
    used.add(name);
    const key = `${record.id}/${name}`;
    const blob = await this.deps.blobs.put(key, file.data, file.contentType);
    if (images && isClassifiableImage(file.contentType)) {
      images.push({ name, contentType: file.contentType, data: file.data });
    }
    return {
      file: { name: key.slice(record.id.length + 1), type: blob.contentType, size: blob.size, key },
      megapixels: file.contentType.startsWith('image/') ? await imageMegapixels(file.data) : 0,
    };
  }
}

interface StoredOutputs {
  files: StoredFile[];
  text: string | null;
  output?: StoredOutput;
  megapixels: number | null;
}

/** Buffers log text and writes it (and the stream's `logs` events) a few times a second. */
class LogBuffer {
  private pending = '';
  private timer: NodeJS.Timeout | undefined;
  private logs: string;

  constructor(
    private readonly deps: PredictionDeps,
    private readonly record: PredictionRecord,
  ) {
    this.logs = record.logs;
  }

  /** Every log line so far, flushed or not. */
  text(): string {
    return this.logs + this.pending;
  }

  add(text: string): void {
    this.pending += text.endsWith('\n') ? text : `${text}\n`;
    this.timer ??= setTimeout(
      () =>
        void this.flush().catch((error: Error) =>
          this.deps.log.warn(
            { err: error.message, prediction: this.record.id },
            'prediction logs not recorded',
          ),
        ),
      LOG_FLUSH_MS,
    );
  }

  async flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (!this.pending) return;
    const text = this.pending;
    this.pending = '';
    this.logs += text;
    await this.deps.store.update(this.record.id, { logs: this.logs });
    if (this.record.stream) await emitStream(this.deps, this.record.id, 'logs', text);
  }
}

/** Text models served as predictions run through their inference adapter: the output is the text. */
async function runTextModel(
  provider: InferenceProvider,
  model: string,
  input: Record<string, unknown>,
  record: PredictionRecord,
  signal: AbortSignal,
  onPiece: (piece: string) => void,
): Promise<BackendResult> {
  const prompt = typeof input.prompt === 'string' ? input.prompt : JSON.stringify(input);
  const messages: Array<{ role: string; content: string }> = [];
  if (typeof input.system_prompt === 'string')
    messages.push({ role: 'system', content: input.system_prompt });
  messages.push({ role: 'user', content: prompt });
  const body: Record<string, unknown> = { model, messages, stream: record.stream };
  for (const field of ['max_tokens', 'temperature', 'top_p', 'stop', 'seed'] as const) {
    if (input[field] !== undefined) body[field] = input[field];
  }
  const result = await provider.chat(body, { signal, requestId: record.id });
  if (result.kind === 'json') {
    const choices = result.body.choices as Array<{ message?: { content?: string } }> | undefined;
    return { outputs: [{ kind: 'text', text: choices?.[0]?.message?.content ?? '' }] };
  }
  let text = '';
  for await (const event of result.events) {
    const chunk = JSON.parse(event.data) as { choices?: Array<{ delta?: { content?: string } }> };
    const piece = chunk.choices?.[0]?.delta?.content;
    if (piece) {
      text += piece;
      onPiece(piece);
    }
  }
  return { outputs: [{ kind: 'text', text }] };
}

/** Blob keys allow letters, digits, `.`, `_`, `-`; backend file names are anything. */
function safeName(name: string, index: number): string {
  const cleaned = name
    .replace(/[^A-Za-z0-9._-]/g, '_')
    .replace(/\.{2,}/g, '.')
    .replace(/^[^A-Za-z0-9]+/, '');
  return (cleaned || `output_${index}`).slice(0, 100);
}

async function imageMegapixels(data: Buffer): Promise<number> {
  try {
    const { width, height } = await sharp(data).metadata();
    return width && height ? (width * height) / 1e6 : 0;
  } catch {
    return 0;
  }
}

function failureMessage(error: unknown): string {
  if (error instanceof BackendError) return error.message;
  // Anything else is our bug or an unexpected backend failure: say so without internals.
  return 'The prediction failed in its backend';
}
