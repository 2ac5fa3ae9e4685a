/**
 * The safety layer's entry points for the routes: which policy and classifier a request gets (nothing
 * when the policy is off), and the prompt and completion checks that give Azure-shaped results and a
 * verdict. Built once at start (buildSafety); nothing here is computed per request that could be earlier.
 */
import { GantryError } from '../errors.js';
import type { Metrics } from '../metrics.js';
import { type ContentFilterResults, evaluate, unavailableResults } from './azure.js';
import type { Category } from './categories.js';
import {
  ClassifierUnavailable,
  type Findings,
  mergeFindings,
  type TextClassifier,
  type TextSource,
} from './classifier.js';
import { type PolicyTable, resolvePolicy, type SafetyPolicy } from './policy.js';

export type FailurePolicy = 'open' | 'closed';

export interface ClassifierEntry {
  classifier: TextClassifier;
  /** What a failed or timed-out check does: `open` lets the request through (results carry the error). */
  onFailure: FailurePolicy;
}

/** The safety layer of one Gantry instance. */
export interface Safety {
  table: PolicyTable;
  /** The config's key policies by the keys' store ids (keyPoliciesById). */
  byKeyId: ReadonlyMap<string, string>;
  classifiers: ReadonlyMap<string, ClassifierEntry>;
  /** Characters of a blocked-mode stream held back until they are checked (README, "Safety"). */
  streamWindowChars: number;
}

/** The policy and classifier one request runs under. */
export interface ActiveSafety {
  policy: SafetyPolicy;
  classifier: TextClassifier;
  onFailure: FailurePolicy;
}

/** Undefined when the request's policy is `off`: then nothing of the safety layer runs for it. */
export function activeSafety(
  safety: Safety,
  model: string,
  principal: { account: { name: string }; key: { id: string } },
): ActiveSafety | undefined {
  const table = safety.table;
  // A config that names no policy anywhere (the common case) costs four reads, not the key's lookup.
  if (
    table.defaultPolicy === 'off' &&
    table.byModel.size === 0 &&
    table.byAccount.size === 0 &&
    safety.byKeyId.size === 0
  ) {
    return undefined;
  }
  const policy = resolvePolicy(table, safety.byKeyId, model, principal.account.name, principal.key.id);
  if (policy.mode === 'off') return undefined;
  // config/load.ts checks every classifier name at start.
  const entry = safety.classifiers.get(policy.classifier) as ClassifierEntry;
  return { policy, classifier: entry.classifier, onFailure: entry.onFailure };
}

/** One checked text (or set of texts): Azure's results and what the policy makes of them. */
export interface SafetyCheck {
  results: ContentFilterResults;
  /** Categories over the policy's thresholds (reported in every mode; acted on in `block`). */
  flagged: Category[];
  /** The policy blocks it. */
  blocked: boolean;
  /** What the classifier found; undefined when it could not run. */
  findings: Findings | undefined;
}

export interface PromptPart {
  text: string;
  /** `prompt` for what the user or system said; `document` for tool outputs and documents. */
  source: Extract<TextSource, 'prompt' | 'document'>;
}

/**
 * Checks the prompt's texts as one prompt (Azure's prompt_index 0). `known`: findings already made
 * (e.g. personal data masked before the check), merged into the classifier's.
 */
export async function checkPrompt(
  active: ActiveSafety,
  parts: readonly PromptPart[],
  signal?: AbortSignal,
  known?: Findings,
): Promise<SafetyCheck> {
  return check(active, 'prompt', async () => {
    const found: Findings[] = known === undefined ? [] : [known];
    // Offline classifiers answer synchronously: those findings are taken as they come, with no promise
    // per part. A remote one answers with promises: every part is asked at once, so a prompt of N parts
    // costs one round trip of latency, not N.
    let pending: Promise<Findings>[] | undefined;
    for (const part of parts) {
      if (part.text === '') continue;
      const answer = classify(active.classifier, part.text, part.source, signal);
      if (!(answer instanceof Promise)) found.push(answer);
      else if (pending === undefined) pending = [answer];
      else pending.push(answer);
    }
    if (pending !== undefined) found.push(...(await Promise.all(pending)));
    return mergeFindings(found);
  });
}

/** Checks a completion's text (all of it, or a stream's window with what came before). */
export async function checkCompletion(
  active: ActiveSafety,
  text: string,
  signal?: AbortSignal,
): Promise<SafetyCheck> {
  return check(active, 'completion', async () => classify(active.classifier, text, 'completion', signal));
}

async function check(
  active: ActiveSafety,
  source: 'prompt' | 'completion',
  run: () => Promise<Findings>,
): Promise<SafetyCheck> {
  let findings: Findings;
  try {
    findings = await run();
  } catch (err) {
    if (!(err instanceof ClassifierUnavailable)) throw err;
    if (active.onFailure === 'closed') {
      throw classifierDown(err);
    }
    return { results: unavailableResults(err.message), flagged: [], blocked: false, findings: undefined };
  }
  const { results, flagged } = evaluate(
    findings,
    active.policy,
    source === 'prompt' ? 'prompt' : 'completion',
  );
  return { results, flagged, blocked: active.policy.mode === 'block' && flagged.length > 0, findings };
}

function classify(
  classifier: TextClassifier,
  text: string,
  source: TextSource,
  signal: AbortSignal | undefined,
): Findings | Promise<Findings> {
  return classifier.classify(text, source, signal);
}

/** Azure's `prompt_filter_results` for a chat completion: one entry, prompt_index 0. */
export function promptFilterResults(check: SafetyCheck): Array<{
  prompt_index: number;
  content_filter_results: ContentFilterResults;
}> {
  return [{ prompt_index: 0, content_filter_results: check.results }];
}

const ATTACKS: ReadonlySet<Category> = new Set(['jailbreak', 'indirect_attack']);

/**
 * The 400 a blocked prompt gets (Azure's answer: code `content_filter`, the results in `innererror`):
 * SECURITY_VIOLATION for a prompt attack, CONTENT_POLICY_VIOLATION for the rest.
 */
export function blockedPromptError(check: SafetyCheck): GantryError {
  const attack = check.flagged.some((c) => ATTACKS.has(c));
  return new GantryError(attack ? 'SECURITY_VIOLATION' : 'CONTENT_POLICY_VIOLATION', {
    status: 400,
    code: 'content_filter',
    param: 'prompt',
    message: `The prompt was filtered by the content policy (${check.flagged.join(', ')}). Please modify your prompt and retry.`,
    details: { categories: check.flagged },
    innererror: { code: 'ResponsibleAIPolicyViolation', content_filter_result: check.results },
  });
}

/** What the safety layer did to one request, for its usage record (never any text). */
export interface SafetyOutcome {
  /** Categories flagged by any check of the request. */
  flagged: Set<Category>;
  /** A check blocked the prompt or the completion. */
  blocked: boolean;
  /** Pieces of personal data masked before the request went upstream. */
  redacted: number;
}

export type SafetyApi = 'chat' | 'responses' | 'predictions';

/**
 * Counts one check in the metrics and adds it to the request's outcome. `seconds` is how long it took.
 */
export function recordCheck(
  metrics: Metrics,
  outcome: SafetyOutcome,
  api: SafetyApi,
  stage: 'prompt' | 'completion',
  classifier: string,
  check: SafetyCheck,
  seconds: number,
): void {
  const result =
    check.findings === undefined
      ? 'error'
      : check.blocked
        ? 'blocked'
        : check.flagged.length > 0
          ? 'flagged'
          : 'clean';
  metrics.safetyCheckDone(api, stage, classifier, result, seconds);
  const action = check.blocked ? 'blocked' : 'annotated';
  for (const category of check.flagged) {
    metrics.safetyFlags.inc({ api, stage, category, action });
    outcome.flagged.add(category);
  }
  if (check.blocked) outcome.blocked = true;
}

/** Runs one check, timed, and counts it (recordCheck) for `api` and `stage`. */
export async function countedCheck(
  metrics: Metrics,
  outcome: SafetyOutcome,
  api: SafetyApi,
  stage: 'prompt' | 'completion',
  classifier: string,
  run: () => Promise<SafetyCheck>,
): Promise<SafetyCheck> {
  const started = performance.now();
  let check: SafetyCheck;
  try {
    check = await run();
  } catch (err) {
    // A classifier down under a policy that fails closed: the request ends in a 503, counted as an error.
    metrics.safetyCheckDone(api, stage, classifier, 'error', (performance.now() - started) / 1000);
    throw err;
  }
  recordCheck(metrics, outcome, api, stage, classifier, check, (performance.now() - started) / 1000);
  return check;
}

export function newSafetyOutcome(): SafetyOutcome {
  return { flagged: new Set(), blocked: false, redacted: 0 };
}

/** The 503 of a check that could not run under a policy that fails closed. */
export function classifierDown(cause: ClassifierUnavailable): GantryError {
  return new GantryError('SERVICE_UNAVAILABLE', {
    message: 'The safety classifier is unavailable and the policy fails closed; retry later',
    code: 'content_filter_unavailable',
    cause,
  });
}
