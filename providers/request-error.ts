/**
 * A request an adapter refuses before any network call: a parameter its backend cannot honour, a
 * missing field it needs, an operation the backend does not offer, a prompt over the model's context.
 * Adapters stand on their own: they throw this, and the gateway maps `reason` onto its own error
 * catalogue (src/error-handler.ts). `code` is OpenAI's error code where one applies
 * (e.g. `context_length_exceeded`), sent to the client in place of the catalogue's.
 */
export type RefusalReason = 'invalid_parameter' | 'missing_required_field' | 'not_supported';

export class ProviderRequestError extends Error {
  override readonly name = 'ProviderRequestError';

  constructor(
    readonly reason: RefusalReason,
    message: string,
    readonly param: string | null = null,
    readonly code?: string,
  ) {
    super(message);
  }
}

/** The usual refusal: `param` holds a value the backend cannot take. */
export function invalidParameter(param: string, message: string, code?: string): ProviderRequestError {
  return new ProviderRequestError('invalid_parameter', message, param, code);
}
