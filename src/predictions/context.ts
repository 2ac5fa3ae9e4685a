import type { FastifyBaseLogger } from 'fastify';
import type { PredictionBackend } from '../../providers/predictions/types.js';
import type { InferenceProvider } from '../../providers/types.js';
import type { BlobStore } from '../blobs/types.js';
import type { Catalog } from '../catalog.js';
import type { GantryConfig } from '../config/types.js';
import type { Metrics } from '../metrics.js';
import type { Safety } from '../safety/engine.js';
import type { Services } from '../services.js';
import type { UsageBatcher } from '../usage/index.js';
import type { InputValidator } from './input-schema.js';
import type { EventBus, JobQueue, PredictionStore } from './types.js';

/** Everything the prediction API, workers and webhook deliveries share; built once at start. */
export interface PredictionDeps {
  config: GantryConfig;
  catalog: Catalog;
  store: PredictionStore;
  queue: JobQueue;
  bus: EventBus;
  blobs: BlobStore;
  /** Media backends by provider name (cog, replicate, local). */
  backends: ReadonlyMap<string, PredictionBackend>;
  /** Inference providers, for text models that also serve predictions. */
  inference: ReadonlyMap<string, InferenceProvider>;
  /** Compiled input schemas by model namespace. */
  validators: ReadonlyMap<string, InputValidator>;
  /** Seals secret input fields and webhook tokens; derives per-account webhook secrets. */
  secretKey: Buffer;
  /** Limiter and credit balances (admission), shared with the inference routes. */
  services: Services;
  usage: UsageBatcher;
  metrics: Metrics;
  /** Safety policies and classifiers: the prompt check at create (service.ts). */
  safety: Safety;
  /** By model namespace: the inputs whose text the prompt check reads (promptFieldsOf, at start). */
  promptFields: ReadonlyMap<string, readonly string[]>;
  log: FastifyBaseLogger;
  /** Origin of absolute URLs (known once listening when the config gives none). */
  publicUrl(): string;
}
