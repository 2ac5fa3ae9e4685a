/**
 * The four harm categories (hate, sexual, violence, self_harm) with a severity each, from a weighted
 * lexicon and phrase patterns (harm-lexicon.ts). Severity mapping (README, "Classifiers"):
 * - safe: none of the category's words, or only in harmless uses ("kill the process", "breast cancer").
 * - low: the category's vocabulary without intent or target: news, history, fiction, medicine,
 *   education, mild innuendo (word score >= 1).
 * - medium: directed or explicit: a threat or a wish of harm against someone, graphic description,
 *   dehumanising generalisations or slurs against a group, explicit sexual content, first-person
 *   thoughts of suicide or self-harm; or much of the vocabulary at once (word score >= MEDIUM_SCORE).
 * - high: instructions or plans for serious harm (weapons, killing, suicide methods), a threat with the
 *   means or the place, calls for violence against a group, sexual content involving minors or
 *   non-consent, self-harm intent.
 * Each pattern sets the least severity of a text it matches; the words' score can raise it to medium.
 * A violent threat with a mark of jest ("lol", "haha") is low; "kill myself" counts for self_harm only.
 *
 * Cost: one scan of the lower-cased text with all categories' words (one trie-shaped expression); a
 * text with none of them stops there. Otherwise harmless uses are blanked out, the words are scored,
 * and only the categories with a word run their patterns.
 */
import { HARM_CATEGORIES, type HarmCategory, type Severity, severityRank } from '../categories.js';
import { HARM, HARMLESS, JEST, SELF_DIRECTED } from './harm-lexicon.js';
import { allMatches } from './matches.js';
import { trieSource } from './trie.js';

/** Word score from which the vocabulary alone makes a text low, and medium. */
export const LOW_SCORE = 1;
export const MEDIUM_SCORE = 5;
/** One word counts at most this many times. */
const REPEATS = 2;

type Weights = Array<[HarmCategory, number]>;

const WEIGHTS = new Map<string, Weights>();
for (const category of HARM_CATEGORIES) {
  for (const [forms, weight] of Object.entries(HARM[category].words)) {
    for (const form of forms.split('|')) {
      const list = WEIGHTS.get(form) ?? [];
      list.push([category, weight]);
      WEIGHTS.set(form, list);
    }
  }
}

const WORDS = (): RegExp => new RegExp(`\\b(?:${trieSource(WEIGHTS.keys())})(?![\\w-])`, 'g');

export interface HarmClassifier {
  classify(lower: string): Record<HarmCategory, Severity>;
}

export function harmClassifier(): HarmClassifier {
  const words = WORDS();
  return {
    classify(lower) {
      const result: Record<HarmCategory, Severity> = {
        hate: 'safe',
        sexual: 'safe',
        violence: 'safe',
        self_harm: 'safe',
      };
      let found = allMatches(words, lower);
      if (found.length === 0) return result;
      let text = lower;
      const present = new Set(found.map((m) => m[0]));
      // Blanked ranges, [start, end) pairs: blanking keeps every offset, so the words found in them are
      // dropped instead of scanning the text again.
      const blanked: number[] = [];
      const blank = (match: string, offset: number): string => {
        blanked.push(offset, offset + match.length);
        return ' '.repeat(match.length);
      };
      for (const harmless of HARMLESS) {
        if (harmless.keys.some((k) => present.has(k))) text = text.replace(harmless.re, blank);
      }
      if (blanked.length > 0) found = found.filter((m) => !within(blanked, m.index));
      const score: Record<HarmCategory, number> = { hate: 0, sexual: 0, violence: 0, self_harm: 0 };
      const seen = new Set<HarmCategory>();
      const counts = new Map<string, number>();
      // "kill myself": the verb is self-harm's, not violence's.
      const self: number[] = [];
      if (text.includes('sel')) for (const m of allMatches(SELF_DIRECTED, text)) self.push(m.index);
      for (const m of found) {
        const word = m[0];
        const n = (counts.get(word) ?? 0) + 1;
        counts.set(word, n);
        const selfDirected = self.includes(m.index);
        for (const [category, weight] of WEIGHTS.get(word) ?? []) {
          if (selfDirected && category === 'violence') continue;
          seen.add(category);
          if (n <= REPEATS) score[category] += weight;
        }
      }
      for (const category of seen) {
        let severity: Severity =
          score[category] >= MEDIUM_SCORE ? 'medium' : score[category] >= LOW_SCORE ? 'low' : 'safe';
        for (const pattern of HARM[category].patterns) {
          if (
            severityRank(pattern.severity) > severityRank(severity) &&
            pattern.keys.some((k) => counts.has(k)) &&
            pattern.re.test(text)
          )
            severity = pattern.severity;
        }
        // A threat made in jest ("lol") is low; instructions and worse stay.
        if (severity === 'medium' && category === 'violence' && JEST.test(text)) severity = 'low';
        result[category] = severity;
      }
      return result;
    },
  };
}

function within(ranges: readonly number[], at: number): boolean {
  for (let i = 0; i < ranges.length; i += 2) {
    if (at >= (ranges[i] as number) && at < (ranges[i + 1] as number)) return true;
  }
  return false;
}
