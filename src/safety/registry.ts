/**
 * The classifiers of one instance, built at start from `safety.classifiers` (README, "Safety"): the
 * built-in `offline` always, and each configured remote service.
 */
import type { ClassifierConfig } from '../config/types.js';
import type { ClassifierEntry } from './engine.js';
import { offlineClassifier } from './offline/index.js';

export function buildClassifiers(configs: readonly ClassifierConfig[]): Map<string, ClassifierEntry> {
  const entries = new Map<string, ClassifierEntry>([
    ['offline', { classifier: offlineClassifier(), onFailure: 'open' }],
  ]);
  for (const config of configs) {
    entries.set(config.name, { classifier: remoteClassifier(config), onFailure: config.onFailure });
  }
  return entries;
}

function remoteClassifier(config: ClassifierConfig): ClassifierEntry['classifier'] {
  throw new Error(`safety classifier "${config.name}": kind ${config.kind} is not built yet`);
}
