/**
 * The error the official SDK throws for a non-2xx answer, awaited: tests assert on its status and body
 * (Gantry's error envelope or the upstream's, passed through).
 */
import OpenAI from 'openai';

export type ApiError = InstanceType<typeof OpenAI.APIError>;

/** The APIError `promise` rejects with; throws if it resolves or rejects with anything else. */
export async function errorOf(promise: Promise<unknown>): Promise<ApiError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (err instanceof OpenAI.APIError) return err;
  throw new Error(`expected an APIError, got ${String(err)}`);
}
