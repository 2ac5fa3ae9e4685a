/**
 * The shared limit store (Redis) could not answer in time: connection down, command timed out, or an
 * unexpected reply. Whether the request is then admitted (fail open) or refused (fail closed) is the
 * caller's policy (see policy.ts), so this is the only error the limiter raises for I/O trouble.
 */
export class LimiterUnavailableError extends Error {
  override readonly name = 'LimiterUnavailableError';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

export function unavailable(error: unknown): LimiterUnavailableError {
  if (error instanceof LimiterUnavailableError) return error;
  const reason = error instanceof Error ? error.message : String(error);
  return new LimiterUnavailableError(`rate limiter unavailable: ${reason}`, { cause: error });
}
