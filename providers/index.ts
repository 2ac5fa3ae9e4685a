import { AnthropicProvider } from './anthropic.js';
import { LocalProvider } from './local.js';
import { OpenAIProvider } from './openai.js';
import type { InferenceProvider, ProviderConfig } from './types.js';

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
