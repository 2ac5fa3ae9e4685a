/**
 * The usage record's view of what the safety layer did (README, "Usage records and credits"): category
 * names and an action, never any checked text.
 */
import { evaluate } from '../safety/azure.js';
import type { DetectionCategory, HarmCategory, Severity } from '../safety/categories.js';
import type { Findings, TextSource } from '../safety/classifier.js';
import type { SafetyOutcome } from '../safety/engine.js';
import type { SafetyPolicy } from '../safety/policy.js';
import type { UsageRecord } from './record.js';

/** `safety_flags` (sorted) and `safety_action` of a request's outcome; undefined outcome: off. */
export function safetyUsageFields(
  outcome: SafetyOutcome | undefined,
): Pick<UsageRecord, 'safety_flags' | 'safety_action'> {
  if (outcome === undefined) return { safety_flags: [], safety_action: null };
  return {
    safety_flags: outcome.flagged.size === 0 ? [] : [...outcome.flagged].sort(),
    safety_action: outcome.blocked ? 'blocked' : outcome.redacted > 0 ? 'redacted' : 'annotated',
  };
}

/**
 * The same fields for a prediction, from the results its record keeps (`metadata.safety`: the prompt's
 * at create, the outputs' at the end). A category counts as flagged when the policy's thresholds put it
 * over, as at the check itself (evaluate); a policy no longer in the config counts only what was
 * filtered. Blocked: a result was filtered; redacted: the prompt check masked personal data.
 */
export function predictionSafetyFields(
  safety: { policy: string; prompt?: object; output?: object } | undefined,
  policies: ReadonlyMap<string, SafetyPolicy>,
): Pick<UsageRecord, 'safety_flags' | 'safety_action'> {
  if (safety === undefined) return { safety_flags: [], safety_action: null };
  const policy = policies.get(safety.policy);
  const flagged = new Set<string>();
  let blocked = false;
  const read = (checked: object | undefined, source: TextSource): void => {
    const results = (checked as { content_filter_results?: unknown } | undefined)?.content_filter_results;
    if (results === null || typeof results !== 'object' || 'error' in results) return;
    const findings: Findings = { harm: {}, detected: {} };
    for (const [category, result] of Object.entries(results as Record<string, unknown>)) {
      if (result === null || typeof result !== 'object') continue;
      const r = result as { filtered?: unknown; severity?: unknown; detected?: unknown };
      if (r.filtered === true) {
        blocked = true;
        flagged.add(category);
      }
      if (typeof r.severity === 'string') findings.harm[category as HarmCategory] = r.severity as Severity;
      if (typeof r.detected === 'boolean') findings.detected[category as DetectionCategory] = r.detected;
    }
    if (policy) for (const category of evaluate(findings, policy, source).flagged) flagged.add(category);
  };
  read(safety.prompt, 'prompt');
  read(safety.output, 'completion');
  const redacted = (safety.prompt as { redacted?: unknown } | undefined)?.redacted;
  return {
    safety_flags: [...flagged].sort(),
    safety_action: blocked
      ? 'blocked'
      : typeof redacted === 'number' && redacted > 0
        ? 'redacted'
        : 'annotated',
  };
}
