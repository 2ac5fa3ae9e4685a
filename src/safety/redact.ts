/**
 * `redact` (README, "Safety"): personal data is masked before a request goes upstream, so the original
 * never leaves Gantry, nor reaches a log or a record.
 */
import type { PiiKind } from './categories.js';
import type { PiiSpan } from './classifier.js';

const PLACEHOLDERS: Readonly<Record<PiiKind, string>> = {
  email: '[EMAIL]',
  phone: '[PHONE]',
  payment_card: '[PAYMENT_CARD]',
  iban: '[IBAN]',
  secret: '[SECRET]',
};

/**
 * `text` with the spans of the listed kinds replaced by their placeholders, and how many were masked.
 * Overlapping spans are masked once, as one.
 */
export function maskText(
  text: string,
  spans: readonly PiiSpan[],
  kinds: ReadonlySet<PiiKind>,
): { text: string; masked: number } {
  const chosen = spans.filter((s) => kinds.has(s.kind)).sort((a, b) => a.start - b.start || b.end - a.end);
  if (chosen.length === 0) return { text, masked: 0 };
  let out = '';
  let at = 0;
  let masked = 0;
  for (const span of chosen) {
    if (span.start < at) continue;
    out += text.slice(at, span.start) + PLACEHOLDERS[span.kind];
    at = span.end;
    masked++;
  }
  return { text: out + text.slice(at), masked };
}
