import type { ProviderConfig } from '../types.js';
import { CogBackend } from './cog.js';
import { LOCAL_MEDIA_MODELS, LocalMediaBackend } from './local.js';
import { ReplicateBackend } from './replicate.js';
import type { PredictionBackend } from './types.js';

/** Provider kinds that run predictions; `local` serves both inference and media predictions. */
export const PREDICTION_KINDS: ReadonlySet<string> = new Set(['cog', 'replicate', 'local']);

/**
 * The prediction backend of a provider. `callbackBase` is where a Cog server in async mode reaches this
 * process (`<callbackBase>/<provider>/<predictionId>?token=…`).
 */
export function createBackend(config: ProviderConfig, callbackBase: () => string): PredictionBackend {
  const common = { name: config.name, kind: config.kind, timeoutMs: config.timeouts.totalMs };
  switch (config.kind) {
    case 'cog':
      return new CogBackend({
        ...common,
        ...(config.baseUrl === undefined ? {} : { baseUrl: config.baseUrl }),
        ...(config.async ? { callbackUrl: () => `${callbackBase()}/${config.name}` } : {}),
      });
    case 'replicate':
      return new ReplicateBackend({
        ...common,
        ...(config.baseUrl === undefined ? {} : { baseUrl: config.baseUrl }),
        ...(config.apiKey === undefined ? {} : { apiKey: config.apiKey }),
        ...(config.pollIntervalMs === undefined ? {} : { pollIntervalMs: config.pollIntervalMs }),
      });
    case 'local':
      return new LocalMediaBackend({ name: config.name });
    default:
      throw new Error(`provider ${config.name}: kind ${config.kind} runs no predictions`);
  }
}

/**
 * The media backend that runs `model` on `provider`, or undefined when the route belongs to an inference
 * provider (a text model served as a prediction): the `local` kind runs its media models itself and
 * leaves local-chat to the inference adapter.
 */
export function mediaBackendFor(
  backends: ReadonlyMap<string, PredictionBackend>,
  provider: string,
  model: string,
): PredictionBackend | undefined {
  const backend = backends.get(provider);
  if (backend?.kind === 'local' && !(LOCAL_MEDIA_MODELS as readonly string[]).includes(model))
    return undefined;
  return backend;
}
