/**
 * The classifiers of one instance, built at start from `safety.classifiers` (README, "Safety"): the
 * built-in `offline` always, and each configured remote service (README, "External classifiers").
 */
import type { ClassifierConfig } from '../config/types.js';
import type { ClassifierEntry } from './engine.js';
import { offlineClassifier } from './offline/index.js';
import { azureContentSafetyClassifier } from './remote/azure-content-safety.js';
import { moderationsClassifier } from './remote/moderations.js';
import type { RemoteClassifier } from './remote/remote.js';

export function buildClassifiers(configs: readonly ClassifierConfig[]): Map<string, ClassifierEntry> {
  const entries = new Map<string, ClassifierEntry>([
    ['offline', { classifier: offlineClassifier(), onFailure: 'open' }],
  ]);
  for (const config of configs) {
    entries.set(config.name, { classifier: remoteClassifier(config), onFailure: config.onFailure });
  }
  return entries;
}

function remoteClassifier(config: ClassifierConfig): RemoteClassifier {
  switch (config.kind) {
    case 'openai_moderations':
      return moderationsClassifier(config);
    case 'azure_content_safety':
      return azureContentSafetyClassifier(config);
  }
}

/** Closes the remote classifiers' connections (Gantry stopping). */
export async function closeClassifiers(entries: ReadonlyMap<string, ClassifierEntry>): Promise<void> {
  await Promise.all([...entries.values()].map((e) => (e.classifier as Partial<RemoteClassifier>).close?.()));
}
