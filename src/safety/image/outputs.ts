/**
 * The image outputs of a prediction checked under its policy (README, "Image outputs"): Azure-shaped
 * results for each image file and for all of them together, and whether the policy blocks them.
 */
import { type ContentFilterResults, evaluate, unavailableResults } from '../azure.js';
import { ClassifierUnavailable, type Findings, mergeFindings } from '../classifier.js';
import type { SafetyCheck } from '../engine.js';
import type { SafetyPolicy } from '../policy.js';
import { classifyImage } from './index.js';
import type { SexualCutoffs } from './mapping.js';

export interface ImageOutput {
  /** The stored file's name, e.g. `output_0.png`. */
  name: string;
  contentType: string;
  data: Uint8Array;
}

/** What a prediction record keeps as `safety.output` (shown in `metadata.safety.output`). */
export interface ImageOutputResults {
  /** All the checked images as one: the highest severity; an error when none could be checked. */
  content_filter_results: ContentFilterResults;
  files: Array<{ name: string; content_filter_results: ContentFilterResults }>;
}

export interface ImageOutputCheck {
  results: ImageOutputResults;
  /** The check of all images together (for metrics); `blocked` when the policy stops the outputs. */
  check: SafetyCheck;
}

/**
 * Classifies each image (one at a time: the classifier thread takes one at a time anyway). An image the
 * classifier cannot read or judge gets an error result and does not block (the check fails open, as the
 * built-in text classifier does); results never hold anything of the image itself. `cutoffs`: the
 * config's `safety.image`.
 */
export async function checkImageOutputs(
  policy: SafetyPolicy,
  images: readonly ImageOutput[],
  cutoffs?: Readonly<SexualCutoffs>,
): Promise<ImageOutputCheck> {
  const files: ImageOutputResults['files'] = [];
  const found: Findings[] = [];
  let failure: string | undefined;
  for (const image of images) {
    let findings: Findings;
    try {
      const classified = await classifyImage(image.data, image.contentType, cutoffs);
      if (!classified) continue;
      findings = { harm: { sexual: classified.sexual }, detected: {} };
    } catch (error) {
      if (!(error instanceof ClassifierUnavailable)) throw error;
      failure ??= error.message;
      files.push({ name: image.name, content_filter_results: unavailableResults(error.message) });
      continue;
    }
    found.push(findings);
    files.push({
      name: image.name,
      content_filter_results: evaluate(findings, policy, 'completion').results,
    });
  }
  if (found.length === 0) {
    const results = unavailableResults(failure ?? 'no image output could be read');
    return {
      results: { content_filter_results: results, files },
      check: { results, flagged: [], blocked: false, findings: undefined },
    };
  }
  const merged = mergeFindings(found);
  const { results, flagged } = evaluate(merged, policy, 'completion');
  return {
    results: { content_filter_results: results, files },
    check: { results, flagged, blocked: policy.mode === 'block' && flagged.length > 0, findings: merged },
  };
}
