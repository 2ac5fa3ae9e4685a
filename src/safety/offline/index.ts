/**
 * The built-in offline classifier (README, "Classifiers"): everything runs in process and nothing is
 * fetched at run time. It composes one classifier per concern:
 * - harm.ts: hate, sexual, violence, self_harm with a severity each (always all four);
 * - jailbreak.ts: prompt attacks, reported as `jailbreak` on prompts and `indirect_attack` on
 *   documents, not evaluated on completions;
 * - profanity.ts: `profanity`;
 * - pii.ts: `pii` and the spans `redact` masks.
 * The harm and jailbreak rules read the text as normalise.ts makes it (lower case, full-width forms,
 * invisible characters and leet undone).
 * Protected material is not evaluated offline, so it is never reported. Everything is compiled when the
 * classifier is built (once, at start); a classify is a few scans of the text.
 */
import type { DetectionCategory } from '../categories.js';
import type { Findings, TextClassifier, TextSource } from '../classifier.js';
import { harmClassifier } from './harm.js';
import { isAttack } from './jailbreak.js';
import { normaliseForRules } from './normalise.js';
import { findPii } from './pii.js';
import { ProfanityClassifier } from './profanity.js';

export function offlineClassifier(): TextClassifier {
  const profanity = new ProfanityClassifier();
  const harm = harmClassifier();
  return {
    name: 'offline',
    classify(text: string, source: TextSource): Findings {
      // The harm and jailbreak rules read the text with trivial obfuscation undone (normalise.ts); PII
      // spans are offsets into the original, and profanity has its library's own normalisation.
      const lower = normaliseForRules(text);
      const pii = findPii(text);
      const detected: Partial<Record<DetectionCategory, boolean>> = {};
      if (source === 'prompt') detected.jailbreak = isAttack(lower);
      else if (source === 'document') detected.indirect_attack = isAttack(lower);
      detected.profanity = profanity.detect(text);
      detected.pii = pii.length > 0;
      return { harm: harm.classify(lower), detected, pii };
    },
  };
}
