/**
 * One interface for every classifier, offline or remote: text in, what was found out. The engine
 * (engine.ts) turns findings into Azure-shaped results and verdicts under a policy (policy.ts).
 */
import type { DetectionCategory, HarmCategory, PiiKind, Severity } from './categories.js';

/** Where a text comes from: what the user or system said, a document or tool output, or the model. */
export type TextSource = 'prompt' | 'document' | 'completion';

export interface PiiSpan {
  kind: PiiKind;
  /** UTF-16 offsets into the classified text, end exclusive. */
  start: number;
  end: number;
}

/**
 * What a classifier found in one text. A category it does not evaluate is absent (it is then left out
 * of the answer, as Azure leaves out filters that are not enabled), never reported as safe.
 */
export interface Findings {
  harm: Partial<Record<HarmCategory, Severity>>;
  detected: Partial<Record<DetectionCategory, boolean>>;
  /** Where the personal data is, for `redact`; present when the classifier evaluates `pii`. */
  pii?: PiiSpan[];
}

export interface TextClassifier {
  /** For logs and metrics. */
  readonly name: string;
  /**
   * Classifies one text. Offline classifiers answer synchronously (no promise on the request path);
   * remote ones return a promise and honour `signal`. A remote classifier that fails or times out
   * throws ClassifierUnavailable; the engine applies the policy's failure rule.
   */
  classify(text: string, source: TextSource, signal?: AbortSignal): Findings | Promise<Findings>;
}

/** A classifier that could not answer (timeout, connection, bad answer): the policy says open or closed. */
export class ClassifierUnavailable extends Error {
  constructor(
    readonly classifier: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ClassifierUnavailable';
  }
}

/**
 * Findings of several texts (or classifiers) as one: the highest severity, detected if any detected.
 * PII spans are offsets into one text, so they are not carried over (`detected.pii` is).
 */
export function mergeFindings(all: readonly Findings[]): Findings {
  const merged: Findings = { harm: {}, detected: {} };
  const order: Severity[] = ['safe', 'low', 'medium', 'high'];
  for (const f of all) {
    for (const [category, severity] of Object.entries(f.harm) as [HarmCategory, Severity][]) {
      const had = merged.harm[category];
      if (had === undefined || order.indexOf(severity) > order.indexOf(had)) merged.harm[category] = severity;
    }
    for (const [category, found] of Object.entries(f.detected) as [DetectionCategory, boolean][]) {
      merged.detected[category] = (merged.detected[category] ?? false) || found;
    }
  }
  return merged;
}
