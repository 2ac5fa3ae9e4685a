import { randomUUID } from 'node:crypto';
import type { PredictionRecord } from '../../src/predictions/types.js';

/** A stored prediction as a fresh create leaves it (status starting, nothing run yet); tests set what they need. */
export function predictionRecord(overrides: Partial<PredictionRecord> = {}): PredictionRecord {
  const createdAt = overrides.createdAt ?? Date.now();
  return {
    id: `p-${randomUUID()}`,
    accountId: 'acct-1',
    keyId: 'key-1',
    model: 'black-forest-labs/flux-schnell',
    modelType: 'image',
    status: 'starting',
    stream: false,
    source: 'api',
    privacy: 'private',
    input: { prompt: 'a cat' },
    secretFields: [],
    sealedSecrets: null,
    webhook: null,
    files: [],
    outputText: null,
    singleOutput: false,
    error: null,
    logs: '',
    progress: null,
    createdAt,
    startedAt: null,
    completedAt: null,
    updatedAt: createdAt,
    predictTime: null,
    megapixels: null,
    creditsUsed: 0,
    dataRemoved: false,
    attempts: 0,
    lease: null,
    ...overrides,
  };
}
