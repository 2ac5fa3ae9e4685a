import { randomUUID } from 'node:crypto';
import type { Principal } from '../auth/authenticate.js';
import type { ModelEntry } from '../config/types.js';
import { GantryError } from '../errors.js';
import type { Findings } from '../safety/classifier.js';
import {
  type ActiveSafety,
  activeSafety,
  blockedPromptError,
  type ClassifierEntry,
  checkPrompt,
  countedCheck,
  newSafetyOutcome,
  type PromptPart,
} from '../safety/engine.js';
import { PRESET_POLICIES, type SafetyPolicy } from '../safety/policy.js';
import { redactorFor } from '../safety/redact.js';
import { newUsageId, safetyUsageFields } from '../usage/index.js';
import { parseWebhookEvents } from '../webhooks/events.js';
import { checkWebhookUrl } from '../webhooks/ssrf.js';
import { admitPrediction, releasePrediction } from './admission.js';
import type { PredictionDeps } from './context.js';
import { checkFileInputs } from './input-files.js';
import { formatFieldErrors, type InputValidator, mergeTopLevelOptions } from './input-schema.js';
import { finish } from './lifecycle.js';
import { sealSecrets } from './secrets.js';
import {
  isTerminal,
  type JsonObject,
  type PredictionRecord,
  type PredictionSafety,
  type WebhookTarget,
} from './types.js';

/** Fields of the create body (spec 4.3); anything else is refused so a typo is not silently ignored. */
const CREATE_FIELDS = new Set([
  'model',
  'input',
  'await',
  'stream',
  'webhook',
  'safety_check',
  'safety_checker',
  'gpu',
  'width',
  'height',
  'num_outputs',
  'strength',
]);
const WEBHOOK_FIELDS = new Set(['url', 'events', 'auth_header', 'auth_token']);
/** A header name per RFC 9110 token rules, and not one that would break the request. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$/;
const RESERVED_HEADERS = new Set([
  'content-type',
  'content-length',
  'host',
  'transfer-encoding',
  'connection',
  'webhook-id',
  'webhook-timestamp',
  'webhook-signature',
  'gantry-signature',
]);

export interface CreateResult {
  record: PredictionRecord;
  created: boolean;
  /** The caller asked to wait for the result. */
  wait: boolean;
  /** Rate-limit headers of the admission. */
  headers: Record<string, string>;
}

export interface CreateOptions {
  /** Cancel-After: the prediction is canceled this long after its creation (worker.ts cancelAtDeadline). */
  cancelAfterMs?: number;
}

/** POST /v1/predictions: validates, stores and queues a prediction. Throws GantryError on bad input. */
export async function createPrediction(
  deps: PredictionDeps,
  principal: Principal,
  body: unknown,
  idempotencyKey: string | undefined,
  options: CreateOptions = {},
): Promise<CreateResult> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new GantryError('VALIDATION_ERROR', { message: 'The body must be a JSON object' });
  }
  const request = body as JsonObject;
  for (const field of Object.keys(request)) {
    if (!CREATE_FIELDS.has(field))
      throw new GantryError('VALIDATION_ERROR', {
        message: `Unknown field ${field}`,
        details: `Fields of a prediction request: ${[...CREATE_FIELDS].join(', ')}.`,
      });
  }
  if (request.model === undefined || request.model === null || request.model === '') {
    throw new GantryError('MISSING_REQUIRED_FIELD', { message: 'model is required', details: 'model' });
  }
  if (request.input === undefined || request.input === null) {
    throw new GantryError('MISSING_REQUIRED_FIELD', { message: 'input is required', details: 'input' });
  }
  if (typeof request.model !== 'string') throw wrongType('model', 'a string');
  if (typeof request.input !== 'object' || Array.isArray(request.input))
    throw wrongType('input', 'an object');
  for (const flag of ['await', 'stream', 'safety_check', 'safety_checker'] as const) {
    if (request[flag] !== undefined && typeof request[flag] !== 'boolean') throw wrongType(flag, 'a boolean');
  }
  if (request.gpu !== undefined && typeof request.gpu !== 'string') throw wrongType('gpu', 'a string');

  const model = deps.catalog.get(request.model, principal.account);
  if (!model) {
    throw new GantryError('MODEL_NOT_FOUND', {
      message: `Model ${request.model} not found`,
      details: 'List the models you can use with GET /v1/models.',
    });
  }
  const entry = model.entry;
  if (!entry.serves.includes('predictions')) {
    throw new GantryError('MODEL_NOT_SUPPORTED', {
      message: `Model ${entry.namespace} is not served by the Predictions API`,
      details: 'Use /v1/chat/completions, /v1/responses or /v1/embeddings for this model.',
    });
  }
  // Offline in the config, or by an operator's override (README, "Status page" → overrides).
  const offline = deps.catalog.offline(entry);
  if (offline !== undefined) {
    throw new GantryError('MODEL_NOT_ACTIVE', {
      message: `Model ${entry.namespace} is offline`,
      ...(offline.reason === undefined ? {} : { details: offline.reason }),
    });
  }
  const validator = deps.validators.get(entry.namespace);
  if (!validator)
    throw new GantryError('MODEL_UNAVAILABLE', { message: 'The model has no input schema loaded' });

  const merged = mergeTopLevelOptions(request, request.input as JsonObject, validator.fieldNames);
  const checked = validator.validate(merged);
  if (!checked.ok) {
    throw new GantryError('INVALID_INPUT', {
      message: `Invalid input: ${formatFieldErrors(checked.fields)}`,
      details: { fields: checked.fields },
    });
  }
  const fileErrors = checkFileInputs(checked.input, validator.fileFields, {
    maxBytes: deps.config.predictions.maxInputFileBytes,
    allowPrivate: deps.config.predictions.webhooks.allowPrivate,
  });
  if (fileErrors.length > 0) {
    throw new GantryError('INVALID_INPUT', {
      message: `Invalid input: ${formatFieldErrors(fileErrors)}`,
      details: { fields: fileErrors },
    });
  }
  if (checked.dropped.length > 0) {
    // The model's `unknown_inputs: drop`: the names only (a value may be a mistyped secret).
    deps.log.info({ model: entry.namespace, dropped: checked.dropped }, 'unknown inputs dropped');
  }

  const webhook = await parseWebhook(deps, request.webhook);
  if (entry.type === 'video' && !webhook) {
    throw new GantryError('MISSING_REQUIRED_FIELD', {
      message: 'A video prediction requires a webhook',
      details: 'webhook.url',
    });
  }

  // The prompt check, before anything is stored or queued: a blocked prompt leaves no prediction.
  let input = checked.input;
  let safety: PredictionSafety | undefined;
  const active = activeSafety(deps.safety, entry.namespace, principal) ?? askedFor(deps, request);
  if (active !== undefined && !optedOut(request, active.policy)) {
    const checkedPrompt = await checkPredictionPrompt(deps, principal, request, entry, active, input);
    input = checkedPrompt.input;
    safety = checkedPrompt.safety;
  }

  // One deadline for everything from here that waits on shared state (idempotency lookup, admission,
  // store, queue): the caller gets an answer within store_timeout_ms, whichever part is slow.
  const deadline = Date.now() + deps.config.predictions.storeTimeoutMs;
  // A retried create is answered before admission: it must not count against the limits again.
  if (idempotencyKey !== undefined) {
    let existing: PredictionRecord | undefined;
    try {
      existing = await withDeadline(
        deps.store.findByIdempotencyKey(principal.account.id, idempotencyKey),
        deadline,
      );
    } catch (error) {
      deps.log.error({ err: (error as Error).message }, 'idempotency key could not be looked up');
      throw storeUnavailable(error);
    }
    if (existing) return { record: existing, created: false, wait: request.await === true, headers: {} };
  }
  const admitting = admitPrediction(deps, principal, entry, input);
  let admission: Awaited<typeof admitting>;
  try {
    admission = await withDeadline(admitting, deadline);
  } catch (error) {
    if (!(error instanceof DeadlineError)) throw error;
    // An admission that completes after the answer holds a slot nobody will use: given back.
    void admitting.then(
      (late) => releasePrediction(deps, late.lease),
      () => undefined,
    );
    deps.log.error({ err: error.message }, 'prediction admission did not answer in time');
    throw storeUnavailable(error);
  }
  const sealed = sealSecrets(input, validator.secretFields, deps.secretKey);
  const now = Date.now();
  const record: PredictionRecord = {
    id: randomUUID(),
    accountId: principal.account.id,
    keyId: principal.key.id,
    model: entry.namespace,
    modelType: entry.type,
    status: 'starting',
    stream: request.stream === true,
    // A prediction made from the console's form (a session, not a key) is the web's.
    source: principal.via === 'session' ? 'web' : 'api',
    privacy: 'private',
    input: sealed.input,
    secretFields: validator.secretFields.filter((f) => input[f] !== undefined && input[f] !== null),
    sealedSecrets: sealed.sealed,
    webhook,
    files: [],
    outputText: null,
    singleOutput: entry.output_schema?.type === 'string',
    error: null,
    logs: '',
    progress: null,
    createdAt: now,
    startedAt: null,
    completedAt: null,
    updatedAt: now,
    predictTime: null,
    megapixels: null,
    creditsUsed: 0,
    dataRemoved: false,
    attempts: 0,
    lease: admission.lease,
    ...(safety === undefined ? {} : { safety }),
    ...(options.cancelAfterMs === undefined ? {} : { cancelAt: now + options.cancelAfterMs }),
  };

  let stored: Awaited<ReturnType<typeof deps.store.create>>;
  let answered = false;
  try {
    stored = await withDeadline(
      (async () => {
        const result = await deps.store.create(record, idempotencyKey);
        // Past the deadline the caller heard 503 and the create is being abandoned: never queued.
        if (result.created && !answered) {
          await deps.queue.add('prediction', record.id);
          // Cancel-After: a delayed job, so the deadline holds while the prediction waits for a worker
          // and survives a restart (worker.ts cancelAtDeadline; embedded start-up re-adds it, setup.ts).
          if (record.cancelAt !== undefined) {
            await deps.queue.add('deadline', record.id, { delayMs: record.cancelAt - Date.now() });
          }
        }
        return result;
      })(),
      deadline,
    );
  } catch (error) {
    answered = true;
    // The caller hears 503, so the prediction must never run: a create still on its way (queued behind
    // a Redis outage) is voided, one stored but not queued is taken back. Not awaited: the answer must
    // not wait for the outage; the store sends the first steps at once, ahead of the caller's retry.
    void deps.store
      .abandon(
        record.id,
        idempotencyKey === undefined ? undefined : { accountId: record.accountId, key: idempotencyKey },
      )
      .catch((e: Error) => deps.log.warn({ err: e.message, prediction: record.id }, 'abandon failed'));
    await releasePrediction(deps, admission.lease);
    deps.log.error({ err: (error as Error).message }, 'prediction could not be stored or queued');
    throw storeUnavailable(error);
  }
  // A retried create returns the first prediction; the slot taken for this call is not needed.
  if (!stored.created) await releasePrediction(deps, admission.lease);
  return {
    record: stored.record,
    created: stored.created,
    wait: request.await === true,
    headers: admission.headers,
  };
}

/** Prompt inputs by name: read whatever the model's schema says (promptFieldsOf). */
const PROMPT_NAMES: ReadonlySet<string> = new Set(['prompt', 'negative_prompt', 'text']);

/**
 * The inputs whose text the prompt check reads (README, "Safety", Predictions), computed once per model
 * at start: `prompt`, `negative_prompt` and `text`, and every other top-level string input that is not
 * a file or URI (`format`), a choice (`enum`, `const`, or a Cog `allOf`/`$ref` choice), or a secret.
 * Numbers, booleans, lists and objects are not read.
 */
export function promptFieldsOf(schema: Record<string, unknown>, validator: InputValidator): string[] {
  const properties = schema.properties;
  if (properties === null || typeof properties !== 'object') return [];
  const skip = new Set([...validator.fileFields, ...validator.secretFields]);
  const fields: string[] = [];
  for (const name of validator.fieldNames) {
    if (skip.has(name)) continue;
    const p = (properties as Record<string, unknown>)[name];
    if (p === null || typeof p !== 'object') continue;
    const property = p as Record<string, unknown>;
    const choice = 'enum' in property || 'const' in property || 'allOf' in property || '$ref' in property;
    const plainString = property.type === 'string' && property.format === undefined && !choice;
    if (plainString || (PROMPT_NAMES.has(name) && !choice && property.format === undefined))
      fields.push(name);
  }
  return fields;
}

/**
 * A client that asks for the check (`safety_check: true` or `safety_checker: true`) where the policy is
 * off gets it annotated by the built-in classifier: the results in `metadata.safety`, nothing blocked.
 */
function askedFor(deps: PredictionDeps, request: JsonObject): ActiveSafety | undefined {
  if (request.safety_check !== true && request.safety_checker !== true) return undefined;
  const offline = deps.safety.classifiers.get('offline') as ClassifierEntry;
  return {
    policy: PRESET_POLICIES.annotate as SafetyPolicy,
    classifier: offline.classifier,
    onFailure: 'open',
  };
}

/**
 * `safety_check: false` (or `safety_checker: false`, the other spelling) skips the check under a policy
 * that only annotates; a policy that blocks or redacts always runs: the operator's choice, not the client's.
 */
function optedOut(request: JsonObject, policy: SafetyPolicy): boolean {
  if (request.safety_check !== false && request.safety_checker !== false) return false;
  return policy.mode !== 'block' && policy.redact.length === 0;
}

/**
 * Checks the prompt inputs as one prompt. Blocked: 400 CONTENT_POLICY_VIOLATION (SECURITY_VIOLATION for
 * a prompt attack) and a usage record of the refusal, with its flags. Otherwise the results for the
 * record and, under a redact policy, the input with personal data masked (what is stored and sent).
 */
async function checkPredictionPrompt(
  deps: PredictionDeps,
  principal: Principal,
  request: JsonObject,
  entry: ModelEntry,
  active: ActiveSafety,
  input: JsonObject,
): Promise<{ input: JsonObject; safety: PredictionSafety }> {
  const startedAt = performance.now();
  const fields = (deps.promptFields.get(entry.namespace) ?? []).filter(
    (f) => typeof input[f] === 'string' && input[f] !== '',
  );
  // Masked first, with the offline classifier in process (redact.ts): the policy's classifier, which may
  // be a remote service, sees only the masked text, and the masked input is what is stored and run.
  const redactor = redactorFor(deps.safety, active.policy);
  let masked = 0;
  if (redactor !== undefined) {
    let copy: JsonObject | undefined;
    for (const field of fields) {
      const text = input[field] as string;
      const out = redactor.mask(text);
      if (out === text) continue;
      copy ??= { ...input };
      copy[field] = out;
    }
    masked = redactor.masked;
    if (copy !== undefined) input = copy;
  }
  const parts: PromptPart[] = fields.map((f) => ({ text: input[f] as string, source: 'prompt' }));
  // What was masked is no longer in the checked text: `pii` is reported detected all the same.
  const known: Findings | undefined = masked > 0 ? { harm: {}, detected: { pii: true } } : undefined;
  const outcome = newSafetyOutcome();
  outcome.redacted = masked;
  const check = await countedCheck(
    deps.metrics,
    outcome,
    'predictions',
    'prompt',
    active.classifier.name,
    () => checkPrompt(active, parts, undefined, known),
  );
  if (check.blocked) {
    const error = blockedPromptError(check);
    const now = Date.now();
    // The refusal is metered like a blocked chat prompt: nothing billed, the flags kept (never the text).
    deps.usage.add({
      id: newUsageId(now),
      time: new Date(now).toISOString(),
      account_id: principal.account.id,
      key_id: principal.key.id,
      model: entry.namespace,
      provider: entry.routes[0]?.provider ?? 'none',
      api: 'prediction',
      outcome: 'error',
      status: error.status,
      error_id: error.errorId,
      input_tokens: 0,
      cached_input_tokens: 0,
      cache_write_input_tokens: 0,
      output_tokens: 0,
      media_units: null,
      cost: 0,
      currency: String(entry.pricing?.currency ?? 'USD'),
      credits: 0,
      latency_ms: Math.round((performance.now() - startedAt) * 1000) / 1000,
      ttft_ms: null,
      stream: request.stream === true,
      ...safetyUsageFields(outcome),
    });
    throw error;
  }
  const prompt: JsonObject = { content_filter_results: check.results as JsonObject };
  if (masked > 0) prompt.redacted = masked;
  return { input, safety: { policy: active.policy.name, prompt } };
}

/** 503 PREDICTION_ERROR: the store or queue failed or missed its deadline; nothing was accepted. */
function storeUnavailable(cause: unknown): GantryError {
  return new GantryError('PREDICTION_ERROR', {
    details: 'The prediction store or queue did not answer; retry with backoff (same Idempotency-Key).',
    headers: { 'retry-after': '1' },
    cause,
  });
}

class DeadlineError extends Error {}

/** The work's outcome, or a DeadlineError at `deadline` (epoch ms; the work itself goes on, see abandon). */
function withDeadline<T>(work: Promise<T>, deadline: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new DeadlineError('no answer within predictions.store_timeout_ms')),
      Math.max(0, deadline - Date.now()),
    );
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

async function parseWebhook(deps: PredictionDeps, value: unknown): Promise<WebhookTarget | null> {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) throw wrongType('webhook', 'an object');
  const webhook = value as JsonObject;
  for (const field of Object.keys(webhook)) {
    if (!WEBHOOK_FIELDS.has(field))
      throw new GantryError('VALIDATION_ERROR', { message: `Unknown field webhook.${field}` });
  }
  if (typeof webhook.url !== 'string' || webhook.url === '') throw wrongType('webhook.url', 'a URL string');
  const check = await checkWebhookUrl(webhook.url, {
    allowPrivate: deps.config.predictions.webhooks.allowPrivate,
  });
  if (!check.ok) {
    throw new GantryError('INVALID_PARAMETER', {
      message: `webhook.url is not allowed: ${check.reason}`,
      param: 'webhook.url',
      details: 'Webhooks go to public http(s) addresses only.',
    });
  }
  const events = parseWebhookEvents(webhook.events);
  if ('error' in events)
    throw new GantryError('INVALID_PARAMETER', { message: events.error, param: 'webhook.events' });

  const header = webhook.auth_header;
  const token = webhook.auth_token;
  if (
    header !== undefined &&
    (typeof header !== 'string' || !HEADER_NAME.test(header) || RESERVED_HEADERS.has(header.toLowerCase()))
  ) {
    throw new GantryError('INVALID_PARAMETER', {
      message: 'webhook.auth_header must be a valid HTTP header name that Gantry does not set itself',
      param: 'webhook.auth_header',
    });
  }
  if (token !== undefined && (typeof token !== 'string' || /[\r\n]/.test(token) || token.length > 4096)) {
    throw new GantryError('INVALID_PARAMETER', {
      message: 'webhook.auth_token must be a single-line string',
      param: 'webhook.auth_token',
    });
  }
  if ((header === undefined) !== (token === undefined)) {
    throw new GantryError('INVALID_PARAMETER_COMBINATION', {
      message: 'webhook.auth_header and webhook.auth_token go together',
    });
  }
  return {
    url: check.url.toString(),
    events: [...events.events],
    authHeader: typeof header === 'string' ? header : null,
    authTokenSealed:
      typeof token === 'string' ? sealSecrets({ token }, ['token'], deps.secretKey).sealed : null,
  };
}

/** The caller's prediction or 404 (another account's looks the same as a missing one). */
export async function ownedPrediction(
  deps: PredictionDeps,
  principal: Principal,
  id: string,
): Promise<PredictionRecord> {
  const record = await deps.store.get(id);
  if (!record || record.accountId !== principal.account.id) {
    throw new GantryError('PREDICTION_NOT_FOUND', {
      message: `Prediction ${id} not found`,
      details: 'It does not exist, was deleted, or belongs to another account.',
    });
  }
  return record;
}

/** Waits until the prediction is terminal or `timeoutMs` passes; returns its latest state either way. */
export async function awaitPrediction(
  deps: PredictionDeps,
  record: PredictionRecord,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<PredictionRecord> {
  if (isTerminal(record.status)) return record;
  let wake: () => void = () => {};
  const woken = new Promise<void>((resolve) => {
    wake = resolve;
  });
  const unsubscribe = await deps.bus.subscribe(record.id, (message) => {
    if (message.type === 'status' && isTerminal(message.status)) wake();
  });
  const timer = setTimeout(wake, timeoutMs);
  // A missed notification (pub/sub is at most once) costs at most a second, not the whole wait.
  const poll = setInterval(async () => {
    const latest = await deps.store.get(record.id).catch(() => undefined);
    if (!latest || isTerminal(latest.status)) wake();
  }, 1_000);
  signal.addEventListener('abort', wake, { once: true });
  try {
    const latest = await deps.store.get(record.id);
    if (!latest || isTerminal(latest.status)) return latest ?? record;
    await woken;
    return (await deps.store.get(record.id)) ?? record;
  } finally {
    clearTimeout(timer);
    clearInterval(poll);
    signal.removeEventListener('abort', wake);
    unsubscribe();
  }
}

/** POST /v1/predictions/{id}/cancel. */
export async function cancelPrediction(
  deps: PredictionDeps,
  principal: Principal,
  id: string,
): Promise<PredictionRecord> {
  const record = await ownedPrediction(deps, principal, id);
  if (isTerminal(record.status)) throw notCancellable(record);
  let canceled: PredictionRecord | undefined;
  try {
    canceled = await finish(deps, id, 'canceled');
  } finally {
    // The worker running it (on whichever instance) stops its backend, whatever else went wrong; a
    // worker that misses this sees the canceled status when it finishes and drops its result.
    await deps.bus.publish(id, { type: 'cancel' }).catch(() => undefined);
  }
  if (!canceled) {
    const latest = await ownedPrediction(deps, principal, id);
    throw notCancellable(latest);
  }
  return canceled;
}

/** DELETE /v1/predictions/{id}: the record, its events, deliveries and files, for good. */
export async function deletePrediction(
  deps: PredictionDeps,
  principal: Principal,
  id: string,
): Promise<void> {
  const record = await ownedPrediction(deps, principal, id);
  if (!isTerminal(record.status)) {
    await finish(deps, id, 'canceled');
    await deps.bus.publish(id, { type: 'cancel' });
  }
  await deps.store.delete(id);
  await deps.blobs.deletePrefix(id);
}

function notCancellable(record: PredictionRecord): GantryError {
  return new GantryError('PREDICTION_NOT_CANCELLABLE', {
    message: `Prediction ${record.id} is already ${record.status}`,
    details: { status: record.status },
  });
}

function wrongType(field: string, expected: string): GantryError {
  return new GantryError('VALIDATION_ERROR', { message: `${field} must be ${expected}`, details: field });
}
