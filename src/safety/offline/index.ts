/**
 * The built-in offline classifier: everything runs in process, nothing is fetched at run time.
 * (Placeholder rules: the real classifiers replace these.)
 */
import type { Findings, PiiSpan, TextClassifier, TextSource } from '../classifier.js';

const JAILBREAK =
  /\b(ignore|disregard|forget)\b.{0,40}\b(previous|prior|above|earlier)\b.{0,20}\b(instructions?|rules|prompts?)\b/i;
const PROFANITY = /\b(fuck\w*|shit\w*|bitch\w*)\b/i;
const EMAIL = /[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}/g;
const VIOLENCE = /\b(kill|murder|stab|shoot)\b/i;

export function offlineClassifier(): TextClassifier {
  return {
    name: 'offline',
    classify(text: string, source: TextSource): Findings {
      const pii: PiiSpan[] = [];
      for (const m of text.matchAll(EMAIL))
        pii.push({ kind: 'email', start: m.index, end: m.index + m[0].length });
      const attack = source !== 'completion' && JAILBREAK.test(text);
      return {
        harm: {
          hate: 'safe',
          sexual: 'safe',
          violence: VIOLENCE.test(text) ? 'medium' : 'safe',
          self_harm: 'safe',
        },
        detected: {
          ...(source === 'prompt' ? { jailbreak: attack } : {}),
          ...(source === 'document' ? { indirect_attack: attack } : {}),
          profanity: PROFANITY.test(text),
          pii: pii.length > 0,
        },
        pii,
      };
    },
  };
}
