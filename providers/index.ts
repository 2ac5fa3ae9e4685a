import { AnthropicProvider } from './anthropic.js';
import { LocalProvider } from './local.js';
import { OpenAIProvider } from './openai.js';
import type { InferenceProvider, ProviderConfig } from './types.js';

/** Provider kinds that serve the inference API (chat, responses, embeddings). */
export const INFERENCE_KINDS: ReadonlySet<string> = new Set(['openai', 'anthropic', 'local']);

/** Adding a provider kind is adding a file and a line here. */
export function createProvider(config: ProviderConfig): InferenceProvider {
  switch (config.kind) {
    case 'openai':
      return new OpenAIProvider(config);
    case 'anthropic':
      return new AnthropicProvider(config);
    case 'local':
      return new LocalProvider(config);
    default:
      throw new Error(`provider ${config.name}: unknown kind ${config.kind}`);
  }
}
