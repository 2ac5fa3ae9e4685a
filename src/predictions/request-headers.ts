/**
 * Replicate's request headers on prediction create (README.md, Predictions, "Waiting and deadlines"):
 * - `Prefer: wait` holds the request until the prediction ends, for up to 60 s; `Prefer: wait=N` for up
 *   to N seconds (1-60). It is an alternative to the body's `await: true`, and wins over it.
 * - `Cancel-After: <duration>` cancels the prediction once that much time has passed since it was
 *   created: `30` or `30s` seconds, `5m`, `1h30m`, `1h2m3s`; at least 5 s.
 * A header that is present but malformed is a 400 INVALID_PARAMETER naming it, never ignored.
 */

import { GantryError } from '../errors.js';

const MAX_WAIT_SECONDS = 60;
const MIN_CANCEL_AFTER_MS = 5_000;
/** A day: a longer deadline is a typo, and timers cap at about 24.8 days anyway. */
const MAX_CANCEL_AFTER_MS = 24 * 3_600_000;
const DURATION = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/;

/** How long `Prefer` asks to wait (ms), or undefined when it does not ask. */
export function preferWaitMs(header: string | undefined): number | undefined {
  if (header === undefined) return undefined;
  for (const raw of header.split(',')) {
    const token = raw.trim();
    const [name, value] = token.split('=', 2).map((part) => part.trim());
    if (name?.toLowerCase() !== 'wait') continue;
    if (value === undefined) return MAX_WAIT_SECONDS * 1000;
    if (/^\d{1,2}$/.test(value)) {
      const seconds = Number(value);
      if (seconds >= 1 && seconds <= MAX_WAIT_SECONDS) return seconds * 1000;
    }
    throw new GantryError('INVALID_PARAMETER', {
      message: `Prefer: ${token} is not valid: wait takes a whole number of seconds from 1 to ${MAX_WAIT_SECONDS}`,
      param: 'Prefer',
    });
  }
  return undefined;
}

/** The delay (ms) a `Cancel-After` header gives, or undefined without the header. */
export function cancelAfterMs(header: string | undefined): number | undefined {
  if (header === undefined) return undefined;
  const text = header.trim().toLowerCase();
  let ms = Number.NaN;
  if (/^\d+$/.test(text)) ms = Number(text) * 1000;
  else {
    const match = text === '' ? null : DURATION.exec(text);
    if (match)
      ms = ((Number(match[1] ?? 0) * 60 + Number(match[2] ?? 0)) * 60 + Number(match[3] ?? 0)) * 1000;
  }
  if (!Number.isFinite(ms) || ms < MIN_CANCEL_AFTER_MS || ms > MAX_CANCEL_AFTER_MS) {
    throw new GantryError('INVALID_PARAMETER', {
      message: `Cancel-After: ${JSON.stringify(header.slice(0, 32))} is not valid: a duration such as 30, 30s, 5m or 1h30m, from 5 s to 24 h`,
      param: 'Cancel-After',
    });
  }
  return ms;
}
