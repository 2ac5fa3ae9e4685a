/**
 * Findings under a policy → Azure OpenAI's content filter results, exactly as Azure names them
 * (README, "Safety"): `{filtered, severity}` per harm category, `{filtered, detected}` per detection
 * category, and `{error: {code, message}}` where the check could not run.
 */
import {
  type Category,
  type DetectionCategory,
  HARM_CATEGORIES,
  type Severity,
  severityRank,
} from './categories.js';
import type { Findings, TextSource } from './classifier.js';
import type { SafetyPolicy } from './policy.js';

export interface SeverityResult {
  filtered: boolean;
  severity: Severity;
}
export interface DetectionResult {
  filtered: boolean;
  detected: boolean;
}
export type ContentFilterResults =
  | Partial<Record<Category, SeverityResult | DetectionResult>>
  | { error: { code: string; message: string } };

/** The detection categories Azure reports on a prompt, and on a completion. */
const PROMPT_DETECTIONS: readonly DetectionCategory[] = ['jailbreak', 'indirect_attack', 'profanity', 'pii'];
const COMPLETION_DETECTIONS: readonly DetectionCategory[] = [
  'profanity',
  'protected_material_text',
  'protected_material_code',
  'pii',
];

export interface Evaluated {
  results: ContentFilterResults;
  /** Categories over the policy's threshold (or detected and filtered by it), whatever the mode. */
  flagged: Category[];
}

/** The results of one check. `filtered` is true only where the policy blocks (mode `block`). */
export function evaluate(findings: Findings, policy: SafetyPolicy, source: TextSource): Evaluated {
  const blocks = policy.mode === 'block';
  const results: Partial<Record<Category, SeverityResult | DetectionResult>> = {};
  const flagged: Category[] = [];
  for (const category of HARM_CATEGORIES) {
    const severity = findings.harm[category];
    if (severity === undefined) continue;
    const threshold = policy.thresholds[category];
    const over = threshold !== 'off' && severityRank(severity) >= severityRank(threshold);
    if (over) flagged.push(category);
    results[category] = { filtered: blocks && over, severity };
  }
  for (const category of source === 'completion' ? COMPLETION_DETECTIONS : PROMPT_DETECTIONS) {
    const detected = findings.detected[category];
    if (detected === undefined) continue;
    const over = detected && policy.filter[category];
    if (over) flagged.push(category);
    results[category] = { filtered: blocks && over, detected };
  }
  return { results, flagged };
}

/**
 * Results for a check that could not run (a remote classifier failed and the policy fails open): Azure's
 * own error entry, code `content_filter_error` and its message "The contents are not filtered", with the
 * reason after it.
 */
export function unavailableResults(reason: string): ContentFilterResults {
  return { error: { code: 'content_filter_error', message: `The contents are not filtered: ${reason}` } };
}
