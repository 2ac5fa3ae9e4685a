/**
 * The image classifier's class probabilities → Azure's severity for `sexual` (README, "Image outputs").
 *
 * The model (nsfwjs' MobileNetV2, README "Image outputs") answers five probabilities that add up to 1:
 * `Drawing` and `Neutral` (safe for work), `Sexy` (suggestive, not explicit), `Porn` (explicit
 * photographs) and `Hentai` (explicit drawings). Azure's image models give `sexual` only severities
 * 0, 2, 4 and 6, i.e. our four levels: safe, low (suggestive), medium (explicit), high (explicit, sure).
 * So: explicit = Porn + Hentai, suggestive = explicit + Sexy, and
 *
 *   high    explicit   >= 0.85
 *   medium  explicit   >= 0.5
 *   low     explicit   >= 0.2, or suggestive >= 0.5
 *   safe    otherwise
 *
 * With the default threshold (`medium`) an image is flagged when the model finds it more likely explicit
 * than not; a merely suggestive one (swimwear: `Sexy`) is `low` and flagged only by a policy whose
 * `sexual` threshold is `low`. hate, violence and self_harm are not evaluated on images (the model has
 * no such classes): they are left out of the results, never reported as safe.
 */
import type { Severity } from '../categories.js';

export const IMAGE_CLASSES = ['Drawing', 'Hentai', 'Neutral', 'Porn', 'Sexy'] as const;
export type ImageClass = (typeof IMAGE_CLASSES)[number];
export type ImageProbabilities = Readonly<Record<ImageClass, number>>;

/**
 * The probability cut-offs of each severity (see above): the defaults, or the operator's
 * `safety.image` (README, "Image outputs"), read once at start (config/safety.ts).
 */
export interface SexualCutoffs {
  /** Explicit probability at or above which the image is `low`. */
  low: number;
  /** Suggestive (explicit + Sexy) probability at or above which the image is `low`. */
  suggestive: number;
  medium: number;
  high: number;
}

export const DEFAULT_CUTOFFS: Readonly<SexualCutoffs> = {
  low: 0.2,
  suggestive: 0.5,
  medium: 0.5,
  high: 0.85,
};

export function sexualSeverity(p: ImageProbabilities, cutoffs: SexualCutoffs = DEFAULT_CUTOFFS): Severity {
  const explicit = p.Porn + p.Hentai;
  if (explicit >= cutoffs.high) return 'high';
  if (explicit >= cutoffs.medium) return 'medium';
  if (explicit >= cutoffs.low || explicit + p.Sexy >= cutoffs.suggestive) return 'low';
  return 'safe';
}
