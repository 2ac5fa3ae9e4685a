/**
 * `openai_moderations`: an OpenAI-compatible moderations endpoint (README, "External classifiers").
 *
 * Request: `POST {url}` with `Authorization: Bearer <key>` and `{"model"?, "input"}`, where `input` is a
 * string, or an array of strings for a long text (one result per string, in order).
 * Answer: `{"id", "model", "results": [{"flagged", "categories": {name: bool}, "category_scores":
 * {name: number 0-1}, "category_applied_input_types"}]}` with names such as `hate`, `hate/threatening`,
 * `harassment`, `self-harm/intent`, `sexual/minors`, `violence/graphic`, `illicit`.
 *
 * It evaluates the four harm categories only: no field of the answer says anything of jailbreaks,
 * profanity, protected material or personal data.
 */
import type { ClassifierConfig } from '../../config/types.js';
import type { HarmCategory, Severity } from '../categories.js';
import type { Findings, TextSource } from '../classifier.js';
import { ClassifierClient } from './client.js';
import type { RemoteClassifier } from './remote.js';
import { splitText } from './split.js';

/** OpenAI's moderation guide: accuracy drops on long texts; pieces under 2,000 characters. */
export const MODERATION_PIECE_CHARS = 1_999;
/** Pieces per request (Gantry's own bound, so no request grows large); more go in parallel requests. */
export const MODERATION_PIECES_PER_REQUEST = 32;

/**
 * Which moderation categories feed which harm category (the highest score wins). Harassment is in
 * Azure's "Hate and fairness"; threats (hate/threatening, harassment/threatening) and help with
 * violent wrongdoing (illicit/violent: weapons) are violence too. `illicit` has no harm category.
 */
export const MODERATION_CATEGORY_MAP: Readonly<Record<HarmCategory, readonly string[]>> = {
  hate: ['hate', 'hate/threatening', 'harassment', 'harassment/threatening'],
  sexual: ['sexual', 'sexual/minors'],
  violence: ['violence', 'violence/graphic', 'hate/threatening', 'harassment/threatening', 'illicit/violent'],
  self_harm: ['self-harm', 'self-harm/intent', 'self-harm/instructions'],
};

/** Score bands: below 0.1 safe, below 0.4 low, below 0.7 medium, else high. */
export const SCORE_BANDS: ReadonlyArray<readonly [number, Severity]> = [
  [0.7, 'high'],
  [0.4, 'medium'],
  [0.1, 'low'],
];

export function severityOfScore(score: number): Severity {
  for (const [floor, severity] of SCORE_BANDS) if (score >= floor) return severity;
  return 'safe';
}

const ORDER: readonly Severity[] = ['safe', 'low', 'medium', 'high'];
const atLeast = (a: Severity, b: Severity): Severity => (ORDER.indexOf(a) >= ORDER.indexOf(b) ? a : b);

export interface ModerationResult {
  categories: Record<string, boolean | null>;
  category_scores: Record<string, number>;
}

/**
 * One moderation result → severities: the score band of the highest contributing score; a category the
 * service flagged is at least `medium` (so the default thresholds act on it), and flagged
 * `sexual/minors` is `high`. A harm category none of whose names is in the answer is left out.
 */
export function moderationSeverities(result: ModerationResult): Partial<Record<HarmCategory, Severity>> {
  const harm: Partial<Record<HarmCategory, Severity>> = {};
  for (const [category, names] of Object.entries(MODERATION_CATEGORY_MAP) as [HarmCategory, string[]][]) {
    let severity: Severity | undefined;
    for (const name of names) {
      const score = result.category_scores[name];
      const flagged = result.categories[name] === true;
      if (typeof score !== 'number' && !flagged) continue;
      let s = typeof score === 'number' ? severityOfScore(score) : 'safe';
      if (flagged) s = atLeast(s, name === 'sexual/minors' ? 'high' : 'medium');
      severity = severity === undefined ? s : atLeast(severity, s);
    }
    if (severity !== undefined) harm[category] = severity;
  }
  return harm;
}

export function moderationsClassifier(config: ClassifierConfig): RemoteClassifier {
  const client = new ClassifierClient(config.name, config.url, config.timeoutMs);
  const headers: Record<string, string> = config.apiKey ? { authorization: `Bearer ${config.apiKey}` } : {};
  // The URL is the endpoint itself (the client prefixes its path); only its query string is added.
  const path = client.query;

  const ask = async (pieces: string[], signal: AbortSignal): Promise<ModerationResult[]> => {
    const body = {
      ...(config.model === undefined ? {} : { model: config.model }),
      input: pieces.length === 1 ? pieces[0] : pieces,
    };
    const answer = (await client.postJson(path, headers, body, signal)) as { results?: unknown };
    const results = answer?.results;
    if (!Array.isArray(results) || results.length !== pieces.length || !results.every(isResult)) {
      throw client.unavailable('the service answered without a result for each input');
    }
    return results;
  };

  return {
    name: config.name,
    async classify(text: string, _source: TextSource, signal?: AbortSignal): Promise<Findings> {
      if (text === '') return { harm: emptyHarm(), detected: {} };
      const pieces = splitText(text, MODERATION_PIECE_CHARS);
      const batches: string[][] = [];
      for (let i = 0; i < pieces.length; i += MODERATION_PIECES_PER_REQUEST) {
        batches.push(pieces.slice(i, i + MODERATION_PIECES_PER_REQUEST));
      }
      const results = await client.within(signal, (linked) =>
        Promise.all(batches.map((batch) => ask(batch, linked))),
      );
      const harm: Partial<Record<HarmCategory, Severity>> = {};
      for (const result of results.flat()) {
        for (const [category, severity] of Object.entries(moderationSeverities(result)) as [
          HarmCategory,
          Severity,
        ][]) {
          const had = harm[category];
          harm[category] = had === undefined ? severity : atLeast(had, severity);
        }
      }
      return { harm, detected: {} };
    },
    close: () => client.close(),
  };
}

function emptyHarm(): Partial<Record<HarmCategory, Severity>> {
  return { hate: 'safe', sexual: 'safe', violence: 'safe', self_harm: 'safe' };
}

function isResult(value: unknown): value is ModerationResult {
  if (value === null || typeof value !== 'object') return false;
  const r = value as { categories?: unknown; category_scores?: unknown };
  return isRecord(r.categories) && isRecord(r.category_scores);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
