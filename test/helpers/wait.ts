/** Waiting in tests: a plain delay, polling an async probe for a value, polling a predicate. */

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Calls `probe` every `everyMs` until it returns something other than `undefined`, and returns that.
 * Throws `timed out waiting for <what>` once `timeoutMs` have passed.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 10_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (after ${timeoutMs} ms)`);
    await sleep(everyMs);
  }
}

/**
 * Checks `check` every `everyMs` until it holds.
 * Throws `timed out waiting for <what>` once `timeoutMs` have passed.
 */
export async function until(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 5_000,
  everyMs = 10,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (after ${timeoutMs} ms)`);
    await sleep(everyMs);
  }
}
