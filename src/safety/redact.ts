/**
 * `redact` (README, "Safety"): personal data is masked before a request goes upstream, so the original
 * never leaves Gantry, nor reaches a log or a record.
 */
import type { PiiKind } from './categories.js';
import type { Findings, PiiSpan, TextClassifier, TextSource } from './classifier.js';
import type { ClassifierEntry, Safety } from './engine.js';
import type { SafetyPolicy } from './policy.js';

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

/** Each policy's `redact` as a set, made once per policy (policies are built at start and kept). */
const KINDS = new WeakMap<SafetyPolicy, ReadonlySet<PiiKind>>();

function kindsOf(policy: SafetyPolicy): ReadonlySet<PiiKind> {
  let kinds = KINDS.get(policy);
  if (kinds === undefined) {
    kinds = new Set(policy.redact);
    KINDS.set(policy, kinds);
  }
  return kinds;
}

/**
 * Masks personal data in the texts of one request. The spans always come from the built-in offline
 * classifier, which runs in process and synchronously, whatever classifier the policy names: the
 * original text reaches no other classifier and no service, and masking never waits or fails open.
 */
export class Redactor {
  /** Pieces masked so far. */
  masked = 0;

  constructor(
    private readonly offline: TextClassifier,
    private readonly kinds: ReadonlySet<PiiKind>,
  ) {}

  mask(text: string, source: Extract<TextSource, 'prompt' | 'document'> = 'prompt'): string {
    if (text === '') return text;
    const findings = this.offline.classify(text, source) as Findings;
    const out = maskText(text, findings.pii ?? [], this.kinds);
    this.masked += out.masked;
    return out.text;
  }
}

/** The request's Redactor, or undefined when its policy masks nothing. */
export function redactorFor(safety: Safety, policy: SafetyPolicy): Redactor | undefined {
  if (policy.redact.length === 0) return undefined;
  // registry.ts always builds the offline classifier.
  const offline = safety.classifiers.get('offline') as ClassifierEntry;
  return new Redactor(offline.classifier, kindsOf(policy));
}

/**
 * An embeddings request's `input` with personal data masked (README, "Safety" → "Embeddings"): a string
 * or each string of an array, as documents. The same value when nothing was found; undefined for token
 * arrays, whose text Gantry cannot read and so cannot mask.
 */
export function redactEmbeddingInput(input: unknown, redactor: Redactor): string | string[] | undefined {
  if (typeof input === 'string') return redactor.mask(input, 'document');
  if (!Array.isArray(input) || !input.every((item) => typeof item === 'string')) return undefined;
  const before = redactor.masked;
  const out = input.map((item: string) => redactor.mask(item, 'document'));
  return redactor.masked === before ? input : out;
}
