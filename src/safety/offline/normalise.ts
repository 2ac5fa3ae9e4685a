/**
 * The text that the harm and jailbreak rules read (README, "Classifiers"): lower case, and trivial
 * obfuscation undone so that `ｋｉｌｌ`, `ki​ll` (a zero-width space inside) or `Ign0re` read as the
 * words they spell. Personal data is found on the original text (its spans are offsets into it) and
 * profanity has the `obscenity` library's own normalisation, so neither reads this.
 *
 * Cost: a text of plain ASCII without the digits and signs leet uses pays one failing scan besides the
 * lower-casing; English prose whose only other characters are typographic quotes and dashes pays two
 * more scans and the apostrophes' replacement (the rules spell them in ASCII). Otherwise each step runs
 * only when a scan finds its characters:
 * - compatibility forms: NFKC (full-width letters, ligatures, styled and circled letters become plain);
 * - invisible characters removed (zero-width spaces and joiners, soft hyphen, BOM, bidi controls, tag
 *   characters, variation selectors: the default-ignorable code points);
 * - accents and combining marks removed (`k̶i̶l̶l̶`, `kíll`), by decomposing and composing again;
 * - leet: in a word of letters (24 characters at most: longer runs are keys and hashes), the digits
 *   0 1 3 4 5 7 and the signs @ $ read as o i e a s t a s. Numbers are left alone: a word without a
 *   letter (`1488`, `2024`, `$100`), with another digit (`h2o`, `x86`), a number with a short unit
 *   (`10am`, `4th`, `100mg`) or after one letter (`v1`, `a4`).
 */

/** Anything but plain ASCII letters, or a leet digit or sign: the one scan every text pays. */
const MAY_CHANGE = /[\u0080-\uffff]|[013457@$]/;
const NON_ASCII = /[\u0080-\uffff]/;
/** Typographic punctuation that English prose carries and NFKC would not change in a useful way. */
const TYPOGRAPHIC = '\\u00a0\\u2010-\\u2015\\u2018-\\u201f\\u2026\\u2032\\u2033';
const BEYOND_TYPOGRAPHIC = new RegExp(`[^\\x00-\\x7f${TYPOGRAPHIC}]`);
/**
 * Default-ignorable code points (Unicode's DerivedCoreProperties), spelt out: an expression without the
 * `u` flag scans faster than `\p{Default_Ignorable_Code_Point}`. The astral ones (tag characters
 * U+E0000-E0FFF, U+1BCA0-1BCA3, U+1D173-1D17A) are matched as their surrogate pairs.
 */
const INVISIBLE_CLASS =
  '\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0\\ufff0-\\ufff8';
const INVISIBLE_SOURCE = `[${INVISIBLE_CLASS}]|[\\udb40-\\udb43][\\udc00-\\udfff]|\\ud82f[\\udca0-\\udca3]|\\ud834[\\udd73-\\udd7a]`;
const INVISIBLE = new RegExp(INVISIBLE_SOURCE, 'g');
const HAS_INVISIBLE = new RegExp(INVISIBLE_SOURCE);
/** Combining marks (diacritics, strike-through and other overlays). */
const MARK_CLASS = '\\u0300-\\u036f\\u1ab0-\\u1aff\\u1dc0-\\u1dff\\u20d0-\\u20ff\\ufe20-\\ufe2f';
const MARKS = new RegExp(`[${MARK_CLASS}]+`, 'g');
/** Letters with accents (Latin-1 and Latin Extended) or combining marks: worth decomposing. */
const ACCENTED = new RegExp(`[\\u00c0-\\u024f\\u1e00-\\u1eff${MARK_CLASS}]`);
const APOSTROPHES = /[\u2018\u2019\u201b\u2032]/g;

/** Each leet digit or sign; the word around it is looked at only there (digits are rare in prose). */
const LEET_AT = /[013457@$]/g;
const NOT_LEET = /[2689]/;
/** Longer runs are identifiers, keys and hashes, not words. */
const LONGEST_WORD = 24;
const LETTER = /[a-z]/;
/** A number with a unit or an ordinal suffix (`10am`, `4th`, `100mg`), or a letter and a number (`v1`, `a4`). */
const NUMBER_UNIT = /^[0-9]+[a-z]{1,3}$|^[a-z][0-9]+$/;
const LEET: Readonly<Record<string, string>> = {
  '0': 'o',
  '1': 'i',
  '3': 'e',
  '4': 'a',
  '5': 's',
  '7': 't',
  '@': 'a',
  $: 's',
};

/** `text` lower-cased, with compatibility forms, invisible characters, accents and leet undone. */
export function normaliseForRules(text: string): string {
  if (!MAY_CHANGE.test(text)) return text.toLowerCase();
  return unleetWords((NON_ASCII.test(text) ? foldUnicode(text) : text).toLowerCase());
}

/** Every word (a run of letters, digits, @ and $) holding a leet digit or sign, read as letters. */
function unleetWords(lower: string): string {
  let out = '';
  let copied = 0;
  LEET_AT.lastIndex = 0;
  for (let m = LEET_AT.exec(lower); m !== null; m = LEET_AT.exec(lower)) {
    let start = m.index;
    while (start > 0 && isWordUnit(lower.charCodeAt(start - 1))) start--;
    let end = m.index + 1;
    while (end < lower.length && isWordUnit(lower.charCodeAt(end))) end++;
    LEET_AT.lastIndex = end;
    const word = lower.slice(start, end);
    const letters = unleet(word);
    if (letters === word) continue;
    out += lower.slice(copied, start) + letters;
    copied = end;
  }
  return copied === 0 ? lower : out + lower.slice(copied);
}

/** a-z, 0-9, @ and $ (the text is lower case). */
function isWordUnit(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x40 || c === 0x24;
}

/** `text` without its invisible characters (profanity.ts removes them too). */
export function removeInvisible(text: string): string {
  return NON_ASCII.test(text) && HAS_INVISIBLE.test(text) ? text.replace(INVISIBLE, '') : text;
}

function foldUnicode(text: string): string {
  let t = text;
  if (BEYOND_TYPOGRAPHIC.test(t)) {
    t = t.normalize('NFKC');
    if (HAS_INVISIBLE.test(t)) t = t.replace(INVISIBLE, '');
    // Decomposed, a letter's accent is a mark of its own; composed again after the marks go.
    if (ACCENTED.test(t)) t = t.normalize('NFKD').replace(MARKS, '').normalize('NFC');
  }
  // The rules spell apostrophes in ASCII ("don't", "i'm").
  return t.replace(APOSTROPHES, "'");
}

function unleet(word: string): string {
  if (word.length > LONGEST_WORD || !LETTER.test(word) || NOT_LEET.test(word) || NUMBER_UNIT.test(word))
    return word;
  let letters = '';
  for (const c of word) letters += LEET[c] ?? c;
  return letters;
}
