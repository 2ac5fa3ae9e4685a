/**
 * Personal data (detected.pii and `pii` spans, UTF-16 offsets into the text, end exclusive; `redact`
 * masks them). Kinds:
 * - email: local@domain.tld.
 * - phone: digit runs shaped like a phone number, kept only when `libphonenumber-js` (full metadata)
 *   says the number is valid: international (`+44 …`, `0044 …`) for its country, national ones for the
 *   United States, the United Kingdom, Germany, France or India, and then only when written like a
 *   phone number (brackets or separators) or after a word such as "call", "phone" or "tel".
 * - payment_card: 13-19 digits (single spaces or dashes between) with a card network's prefix and a
 *   valid Luhn check digit.
 * - iban: country code, check digits and the country's length, checked with `ibantools` (mod 97).
 * - secret: API-key-like tokens (`sk-…`, `gty_…`, `AKIA…`, `ghp_…` and the other GitHub prefixes,
 *   Slack's `xoxb-…`), PEM private keys, and long high-entropy tokens right after a word such as key,
 *   token, secret or password.
 * Every pattern is compiled once; a text without an `@`, two digits in a row or a key-like prefix costs
 * a few quick scans.
 */
import { extractIBAN, getCountrySpecifications, isValidIBAN } from 'ibantools';
import { type CountryCode, parsePhoneNumberFromString } from 'libphonenumber-js/max';
import type { PiiSpan } from '../classifier.js';
import { allMatches } from './matches.js';

/**
 * An email is looked for only at each `@`: its local part backwards (at most 64 characters, so a long
 * run costs one pass), then the domain forwards with a sticky expression.
 */
const LOCAL = /[A-Za-z0-9._%+-]/;
const DOMAIN =
  /[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,24}\b/y;

/** A phone-shaped run: optional +code or 00code, optional (area), then 2-4 digit groups. */
const PHONE =
  /(?<![\w+@/.#-])(?:\+|00)?(?:\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{1,5}(?:[ .-]?\d{2,5}){1,5}(?![\w@]|[.-]\d)/g;
const PHONE_CONTEXT =
  /\b(?:call|phone|tel|telephone|mobile|cell|cellphone|fax|whatsapp|sms|text me|reach me|ring|dial|handy|portable)\b/i;
/** The token before a candidate is a code with digits in it (a tracking or serial number goes on). */
const CODE_BEFORE = /[A-Za-z]*\d[A-Za-z0-9]*[ -]$/;
const DATE = /^(?:\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./]\d{2,4})$/;
const NATIONAL_COUNTRIES: readonly CountryCode[] = ['US', 'GB', 'DE', 'FR', 'IN'];

/** Digits with single spaces or dashes between them. */
const CARD = /(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d])/g;
/** Issuer prefixes: Visa, Mastercard, American Express, Discover, JCB, Diners, UnionPay, Maestro. */
const CARD_PREFIX =
  /^(?:4|5[1-5]|2(?:2[2-9]|[3-6]\d|7[01]|720)|3[47]|6(?:011|5|4[4-9]|2)|35(?:2[89]|[3-8])|3(?:0[0-5]|[689])|5[06-9]|6\d)/;

const IBAN_START = /\b([A-Z]{2})(\d{2})(?=[ ]?[A-Z0-9])/g;
const IBAN_LENGTHS: ReadonlyMap<string, number> = new Map(
  Object.entries(getCountrySpecifications()).flatMap(([code, spec]) =>
    spec.chars ? [[code, spec.chars] as [string, number]] : [],
  ),
);

/** Tokens that are secrets by their shape alone. */
const SECRET_TOKENS =
  /\b(?:sk-(?:proj-|ant-(?:api\d\d-)?|live_|test_)?[A-Za-z0-9_-]{20,}|gty_[A-Za-z0-9_-]{20,}|(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})/g;
const PEM =
  /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|$)/g;
/**
 * A token right after a key/token/secret/password word and `:` or `=` (or "is"). The spaces around the
 * sign are bounded: two unbounded runs side by side would make a long run of spaces quadratic.
 */
const SECRET_ASSIGNED =
  /\b(?:api[_ -]?key|apikey|access[_ -]?key|secret(?:[_ -]?key)?|client[_ -]?secret|token|auth[_ -]?token|bearer|password|passwd|pwd|private[_ -]?key|credentials?)\b["']?\s{0,3}(?:[:=]|is\b|:=|=>)?\s{0,3}["']?([A-Za-z0-9_+/=.~!#$%^&*@-]{16,})/gi;
/** The quick test before the prefixed-token patterns run. */
const TOKEN_HINT = /sk-|gty_|AKIA|ASIA|gh[pousr]_|github_pat_|xox[abposr]-|AIza|PRIVATE KEY/;

export function findPii(text: string): PiiSpan[] {
  const spans: PiiSpan[] = [];
  for (let at = text.indexOf('@'); at !== -1; at = text.indexOf('@', at + 1)) findEmail(text, at, spans);
  findSecrets(text, spans);
  if (/\d\d/.test(text)) {
    findIbans(text, spans);
    findCards(text, spans);
    findPhones(text, spans);
  }
  return spans.sort((a, b) => a.start - b.start || a.end - b.end);
}

function findEmail(text: string, at: number, spans: PiiSpan[]): void {
  let start = at;
  while (start > 0 && at - start <= 64 && LOCAL.test(text[start - 1] as string)) start--;
  if (start === at || at - start > 64) return;
  DOMAIN.lastIndex = at + 1;
  const domain = DOMAIN.exec(text);
  if (domain !== null) spans.push({ kind: 'email', start, end: at + 1 + domain[0].length });
}

function overlaps(spans: readonly PiiSpan[], start: number, end: number): boolean {
  return spans.some((s) => s.start < end && start < s.end);
}

function findSecrets(text: string, spans: PiiSpan[]): void {
  const found: PiiSpan[] = [];
  if (TOKEN_HINT.test(text)) findPrefixed(text, found);
  for (const m of allMatches(SECRET_ASSIGNED, text)) {
    const token = m[1] as string;
    const start = m.index + m[0].length - token.length;
    if (overlaps(found, start, start + token.length) || !looksRandom(token)) continue;
    found.push({ kind: 'secret', start, end: start + token.length });
  }
  for (const span of found) if (!overlaps(spans, span.start, span.end)) spans.push(span);
}

function findPrefixed(text: string, found: PiiSpan[]): void {
  for (const m of allMatches(PEM, text))
    found.push({ kind: 'secret', start: m.index, end: m.index + m[0].length });
  for (const m of allMatches(SECRET_TOKENS, text)) {
    if (!overlaps(found, m.index, m.index + m[0].length))
      found.push({ kind: 'secret', start: m.index, end: m.index + m[0].length });
  }
}

/**
 * A generated token rather than a word or a path: at least 3.5 bits of entropy per character and a mix
 * of character classes (letters and digits, or two cases).
 */
function looksRandom(token: string): boolean {
  const classes = (/[a-z]/.test(token) ? 1 : 0) + (/[A-Z]/.test(token) ? 1 : 0) + (/\d/.test(token) ? 1 : 0);
  if (classes < 2) return false;
  const counts = new Map<string, number>();
  for (const c of token) counts.set(c, (counts.get(c) ?? 0) + 1);
  let bits = 0;
  for (const n of counts.values()) {
    const p = n / token.length;
    bits -= p * Math.log2(p);
  }
  return bits >= 3.5;
}

function findIbans(text: string, spans: PiiSpan[]): void {
  IBAN_START.lastIndex = 0;
  for (let m = IBAN_START.exec(text); m !== null; m = IBAN_START.exec(text)) {
    const length = IBAN_LENGTHS.get(m[1] as string);
    if (length === undefined) continue;
    // Read the country's number of characters, skipping single spaces (the printed form groups by 4).
    let compact = '';
    let i = m.index;
    while (i < text.length && compact.length < length) {
      const c = text[i] as string;
      if (c === ' ' && compact.length > 0 && text[i + 1] !== ' ') {
        i++;
        continue;
      }
      if (!/[A-Za-z0-9]/.test(c)) break;
      compact += c;
      i++;
    }
    if (compact.length !== length || /[A-Za-z0-9]/.test(text[i] ?? '')) continue;
    if (!isValidIBAN(extractIBAN(compact).iban)) continue;
    if (!overlaps(spans, m.index, i)) spans.push({ kind: 'iban', start: m.index, end: i });
    IBAN_START.lastIndex = i;
  }
}

function luhn(digits: string): boolean {
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = digits.charCodeAt(digits.length - 1 - i) - 48;
    if (i % 2 === 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}

function findCards(text: string, spans: PiiSpan[]): void {
  for (const m of allMatches(CARD, text)) {
    // A run may carry more digits than the card (a CVV after one space): try the lengths that end at a
    // group boundary, longest first.
    const run = m[0];
    for (let end = run.length; end > 0; end--) {
      if (end < run.length && /\d/.test(run[end] as string)) continue;
      const digits = run.slice(0, end).replace(/[ -]/g, '');
      if (digits.length < 13) break;
      if (digits.length > 19 || !CARD_PREFIX.test(digits) || !luhn(digits)) continue;
      const start = m.index;
      if (!overlaps(spans, start, start + end)) spans.push({ kind: 'payment_card', start, end: start + end });
      break;
    }
  }
}

function findPhones(text: string, spans: PiiSpan[]): void {
  for (const m of allMatches(PHONE, text)) {
    const raw = m[0];
    const digits = raw.replace(/\D/g, '');
    if (digits.length < 7 || digits.length > 15) continue;
    const start = m.index;
    const end = start + raw.length;
    if (overlaps(spans, start, end) || DATE.test(raw)) continue;
    if (CODE_BEFORE.test(text.slice(Math.max(0, start - 12), start))) continue;
    if (validPhone(raw, text, start)) spans.push({ kind: 'phone', start, end });
  }
}

function validPhone(raw: string, text: string, start: number): boolean {
  if (raw.startsWith('+') || raw.startsWith('00')) {
    const number = parsePhoneNumberFromString(raw.startsWith('00') ? `+${raw.slice(2)}` : raw);
    return number?.isValid() === true;
  }
  // A national number is ambiguous (order numbers, dates, ids): it needs a phone's shape or a word.
  const shaped = /^\(\d+\)|^\d{2,5}[ .-]\d{2,5}[ .-]\d{2,5}/.test(raw);
  if (!shaped && !PHONE_CONTEXT.test(text.slice(Math.max(0, start - 40), start))) return false;
  return NATIONAL_COUNTRIES.some((country) => parsePhoneNumberFromString(raw, country)?.isValid() === true);
}
