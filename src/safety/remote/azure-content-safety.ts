/**
 * `azure_content_safety`: Azure AI Content Safety, API version 2024-09-01 (README, "External
 * classifiers"); `url` is the resource's endpoint, the key goes in `Ocp-Apim-Subscription-Key`.
 *
 * Text analysis, every text: `POST {url}/contentsafety/text:analyze?api-version=2024-09-01` with
 * `{"text", "categories": ["Hate","SelfHarm","Sexual","Violence"], "outputType": "EightSeverityLevels"}`
 * → `{"categoriesAnalysis": [{"category", "severity": 0-7}], "blocklistsMatch": […]}`; severities through
 * severityOfScale. Blocklists are not used.
 *
 * Prompt Shields, prompts and documents (not completions): `POST {url}/contentsafety/text:shieldPrompt`
 * with `{"userPrompt", "documents": [..]}` → `{"userPromptAnalysis": {"attackDetected"},
 * "documentsAnalysis": [{"attackDetected"}]}`. A prompt goes in `userPrompt` (→ `jailbreak`), a document
 * or tool output in `documents` (→ `indirect_attack`), the other field empty.
 *
 * Limits: text analysis takes 10,000 characters, Prompt Shields a prompt of 10,000 and documents of
 * 10,000 in total; a longer text is split and every piece is checked (the highest severity, any attack).
 */
import type { ClassifierConfig } from '../../config/types.js';
import { type HarmCategory, type Severity, severityOfScale } from '../categories.js';
import type { Findings, TextSource } from '../classifier.js';
import { ClassifierClient } from './client.js';
import type { RemoteClassifier } from './remote.js';
import { splitText } from './split.js';

export const AZURE_API_VERSION = '2024-09-01';
/** Characters per request, for both operations (UTF-16 units: never more code points than that). */
export const AZURE_PIECE_CHARS = 10_000;

/** Azure's text categories → Gantry's harm categories. */
export const AZURE_CATEGORY_MAP: Readonly<Record<string, HarmCategory>> = {
  Hate: 'hate',
  SelfHarm: 'self_harm',
  Sexual: 'sexual',
  Violence: 'violence',
};

const ORDER: readonly Severity[] = ['safe', 'low', 'medium', 'high'];
const CATEGORIES = Object.keys(AZURE_CATEGORY_MAP);

/** One text:analyze answer → severities (severityOfScale reads both output types: 0,2,4,6 and 0-7). */
export function azureSeverities(answer: unknown): Partial<Record<HarmCategory, Severity>> | undefined {
  const analysis = (answer as { categoriesAnalysis?: unknown } | null)?.categoriesAnalysis;
  if (!Array.isArray(analysis)) return undefined;
  const harm: Partial<Record<HarmCategory, Severity>> = {};
  for (const item of analysis) {
    const { category, severity } = (item ?? {}) as { category?: unknown; severity?: unknown };
    const ours = typeof category === 'string' ? AZURE_CATEGORY_MAP[category] : undefined;
    if (ours === undefined) continue;
    if (typeof severity !== 'number') return undefined;
    harm[ours] = severityOfScale(severity);
  }
  return harm;
}

export function azureContentSafetyClassifier(config: ClassifierConfig): RemoteClassifier {
  const client = new ClassifierClient(config.name, config.url, config.timeoutMs);
  const headers: Record<string, string> = config.apiKey ? { 'ocp-apim-subscription-key': config.apiKey } : {};
  const analyzePath = `/contentsafety/text:analyze?api-version=${AZURE_API_VERSION}`;
  const shieldPath = `/contentsafety/text:shieldPrompt?api-version=${AZURE_API_VERSION}`;

  const analyze = async (text: string, signal: AbortSignal) => {
    const answer = await client.postJson(
      analyzePath,
      headers,
      { text, categories: CATEGORIES, outputType: 'EightSeverityLevels' },
      signal,
    );
    const harm = azureSeverities(answer);
    if (harm === undefined) throw client.unavailable('the service answered without categoriesAnalysis');
    return harm;
  };

  const shield = async (text: string, source: 'prompt' | 'document', signal: AbortSignal) => {
    const body =
      source === 'prompt' ? { userPrompt: text, documents: [] } : { userPrompt: '', documents: [text] };
    const answer = (await client.postJson(shieldPath, headers, body, signal)) as {
      userPromptAnalysis?: { attackDetected?: unknown };
      documentsAnalysis?: Array<{ attackDetected?: unknown }>;
    } | null;
    const found =
      source === 'prompt'
        ? answer?.userPromptAnalysis?.attackDetected
        : Array.isArray(answer?.documentsAnalysis)
          ? answer.documentsAnalysis[0]?.attackDetected
          : undefined;
    if (typeof found !== 'boolean')
      throw client.unavailable('the service answered without an attack analysis');
    return found;
  };

  return {
    name: config.name,
    async classify(text: string, source: TextSource, signal?: AbortSignal): Promise<Findings> {
      if (text === '') {
        return { harm: { hate: 'safe', sexual: 'safe', violence: 'safe', self_harm: 'safe' }, detected: {} };
      }
      const pieces = splitText(text, AZURE_PIECE_CHARS);
      const [severities, attacks] = await client.within(signal, (linked) =>
        Promise.all([
          Promise.all(pieces.map((piece) => analyze(piece, linked))),
          source === 'completion'
            ? Promise.resolve([])
            : Promise.all(pieces.map((piece) => shield(piece, source, linked))),
        ]),
      );
      const found: Partial<Record<HarmCategory, Severity>> = {};
      for (const piece of severities) {
        for (const [category, severity] of Object.entries(piece) as [HarmCategory, Severity][]) {
          const had = found[category];
          if (had === undefined || ORDER.indexOf(severity) > ORDER.indexOf(had)) found[category] = severity;
        }
      }
      const attack = attacks.some(Boolean);
      return {
        harm: found,
        detected:
          source === 'prompt'
            ? { jailbreak: attack }
            : source === 'document'
              ? { indirect_attack: attack }
              : {},
      };
    },
    close: () => client.close(),
  };
}
