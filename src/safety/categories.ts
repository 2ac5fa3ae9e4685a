/**
 * The safety categories Gantry reports, in the shapes Azure OpenAI uses (README, "Safety"): the four harm
 * categories carry a severity, the others say whether they were detected.
 */

/** Harm categories: `{filtered, severity}` in the answer. */
export const HARM_CATEGORIES = ['hate', 'sexual', 'violence', 'self_harm'] as const;
export type HarmCategory = (typeof HARM_CATEGORIES)[number];

/** Azure's four severity levels, from least to most severe. */
export const SEVERITIES = ['safe', 'low', 'medium', 'high'] as const;
export type Severity = (typeof SEVERITIES)[number];

/**
 * Detection categories: `{filtered, detected}` in the answer. `jailbreak` is a user prompt attack,
 * `indirect_attack` the same in a document or tool output the prompt carries; `pii` is Gantry's own.
 */
export const DETECTION_CATEGORIES = [
  'jailbreak',
  'indirect_attack',
  'profanity',
  'protected_material_text',
  'protected_material_code',
  'pii',
] as const;
export type DetectionCategory = (typeof DETECTION_CATEGORIES)[number];

export type Category = HarmCategory | DetectionCategory;

/** Kinds of personal data the PII classifier finds and `redact` masks. */
export const PII_KINDS = ['email', 'phone', 'payment_card', 'iban', 'secret'] as const;
export type PiiKind = (typeof PII_KINDS)[number];

export function severityRank(severity: Severity): number {
  return SEVERITIES.indexOf(severity);
}

/** Azure AI Content Safety's 0-7 severity scale onto the four levels (0-1 safe, 2-3 low, 4-5 medium, 6-7 high). */
export function severityOfScale(level: number): Severity {
  if (level >= 6) return 'high';
  if (level >= 4) return 'medium';
  if (level >= 2) return 'low';
  return 'safe';
}
