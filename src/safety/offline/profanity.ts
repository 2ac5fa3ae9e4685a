/**
 * Profanity (detected.profanity) with the `obscenity` library: its English word list (with the list's
 * own allowed look-alikes, e.g. "Scunthorpe", "assassin") and its normalisation (confusable Unicode
 * letters, leet speak such as `sh1t` / `@ss`, letter repeats such as `fuuuck`).
 *
 * The list is the library's without its words for sexual topics (the `sexual` category scores those);
 * slurs stay (they are also scored by `hate`).
 *
 * The library's matcher runs about a hundred regular expressions per text, too slow for the request
 * path, so it is the second step only: at construction the library's character transforms are folded
 * into one lookup table and its patterns into one regular expression, which answer "nothing here" for
 * almost every text in one pass; only the words around a place the gate matched go to the library's
 * matcher, which decides (and applies the allowed look-alikes). Spaced-out words ("f u c k",
 * "s.h.i.t") are joined and checked the same way, and invisible characters (zero-width space, soft
 * hyphen, ...) are removed first.
 */
import {
  DataSet,
  englishDataset,
  englishRecommendedTransformers,
  type ParsedPattern,
  pattern,
  RegExpMatcher,
  SyntaxKind,
  type TransformerContainer,
} from 'obscenity';
import { removeInvisible } from './normalise.js';

/**
 * Words of the library's list that name a sexual topic rather than swear (the sexual category scores
 * them), or are historical terms: not profanity here.
 */
const TOPIC_WORDS: ReadonlySet<string> = new Set([
  'anal',
  'anus',
  'bestiality',
  'ejaculate',
  'fellatio',
  'incest',
  'masturbate',
  'orgasm',
  'orgy',
  'penis',
  'porn',
  'rape',
  'semen',
  'sex',
  'vagina',
  'hooker',
  'negro',
]);

/** The library's English list without the topic words, with a few insults it lacks (exported for its tests). */
export function profanityDataset(): DataSet<{ originalWord: string }> {
  const set = new DataSet<{ originalWord: string }>()
    .addAll(englishDataset)
    .removePhrasesIf((phrase) => TOPIC_WORDS.has(phrase.metadata?.originalWord ?? ''));
  for (const [word, p] of [
    ['dumbass', pattern`dumbass`],
    ['jackass', pattern`jackass`],
    ['douche', pattern`|douche`],
    ['bullshit', pattern`bullshit`],
  ] as const) {
    set.addPhrase((phrase) => phrase.setMetadata({ originalWord: word }).addPattern(p));
  }
  return set;
}

type CharFn = (char: number) => number | undefined;

/** Single letters (or leet digits/signs) separated by one or two separators, at least four in a row. */
const SPACED = /(?<![A-Za-z0-9])(?:[A-Za-z0-9@$!|][ .\-_*+~]{1,2}){3,}[A-Za-z0-9@$!|](?![A-Za-z0-9])/g;
/** A cheap test that a text may hold such a run (three spaced single characters). */
const SPACED_HINT = /[A-Za-z0-9@$!|][ .\-_*+~]{1,2}[A-Za-z0-9@$!|][ .\-_*+~]{1,2}[A-Za-z0-9@$!|][ .\-_*+~]/;
const SEPARATORS = /[ .\-_*+~]/g;

export class ProfanityClassifier {
  private readonly matcher: RegExpMatcher;
  private readonly gate: RegExp;
  /** Each pattern alone, sticky, by the letter it starts with (and those that start otherwise). */
  private readonly byLead: Map<string, RegExp[]>;
  private readonly unled: RegExp[];
  /** The library's allowed look-alikes ("assi" of "assistant", "pen is"). */
  private readonly allowed: readonly string[];
  /** The library's per-character transforms (confusables, leet, lower case) for every UTF-16 unit. */
  private readonly table: Int32Array;
  private readonly simple: CharFn[];
  /** How many repeats of a character the library's collapse transform keeps (index: char code < 128). */
  private readonly keep: Int32Array;
  private readonly keepOther: number;
  /** Reused for every text (classify is synchronous): the normalised text, and where each unit came from. */
  private buffer = new Uint16Array(4096);
  private origin = new Int32Array(4096);

  constructor() {
    const built = profanityDataset().build();
    this.matcher = new RegExpMatcher({ ...built, ...englishRecommendedTransformers });
    const gate = gateRegExps(built.blacklistedTerms.map((t) => t.pattern));
    this.gate = gate.gate;
    this.byLead = gate.byLead;
    this.unled = gate.unled;
    this.allowed = built.whitelistedTerms ?? [];
    const containers = englishRecommendedTransformers.blacklistMatcherTransformers as TransformerContainer[];
    this.simple = [];
    let collapse: (() => { transform: CharFn; reset(): void }) | undefined;
    for (const c of containers) {
      if ('transform' in c) this.simple.push(c.transform);
      else collapse = c.factory;
    }
    if (collapse === undefined) throw new Error('obscenity: the English transformers changed shape');
    // The collapse transform's thresholds, read back by feeding it repeats (its options are not exposed).
    const kept = (char: number): number => {
      const t = (collapse as () => { transform: CharFn })();
      let n = 0;
      for (let i = 0; i < 8; i++) if (t.transform(char) !== undefined) n++;
      return n;
    };
    this.keep = new Int32Array(128);
    for (let c = 0; c < 128; c++) this.keep[c] = kept(c);
    this.keepOther = kept(0x100);
    this.table = new Int32Array(0x10000);
    for (let u = 0; u < 0x10000; u++) this.table[u] = this.simpleChain(u);
  }

  detect(input: string): boolean {
    // A zero-width space or soft hyphen inside a word would hide it from the library's matcher too
    // (its transforms keep them): they go first.
    const text = removeInvisible(input);
    if (this.found(text)) return true;
    if (!SPACED_HINT.test(text)) return false;
    SPACED.lastIndex = 0;
    for (let m = SPACED.exec(text); m !== null; m = SPACED.exec(text)) {
      if (this.found(m[0].replace(SEPARATORS, ''))) return true;
    }
    return false;
  }

  /**
   * Each place the gate matches goes to the library's matcher with the words around it (so its allowed
   * look-alikes apply), never the whole text: a long text costs the library a few short windows. After
   * MAX_CHECKS places the library rejected, the text counts as clean.
   */
  private found(text: string): boolean {
    const normal = this.normalise(text);
    this.gate.lastIndex = 0;
    let checks = 0;
    for (let m = this.gate.exec(normal); m !== null; m = this.gate.exec(normal)) {
      this.gate.lastIndex = m.index + 1;
      if (this.allowedAt(text, normal, m.index)) continue;
      const start = this.origin[m.index] as number;
      const end = (this.origin[m.index + m[0].length - 1] as number) + 2;
      if (this.matcher.hasMatch(around(text, start, end))) return true;
      if (++checks === MAX_CHECKS) return false;
    }
    return false;
  }

  /**
   * Whether every pattern matching at this place of the normalised text lies inside one of the library's
   * allowed look-alikes as written in the text ("assi" around the "ass" of "assistant"): the library would
   * reject it the same way (an allowed term's span containing the match's), so it is not asked. Common
   * words ("assistant", "class", "pass") would otherwise cost a call of the library's matcher, tens of
   * microseconds. An allowed term written with more spaces than listed is not recognised here: the
   * library is asked then, and decides.
   */
  private allowedAt(text: string, normal: string, at: number): boolean {
    let matched = false;
    for (const list of [this.byLead.get(normal[at] as string), this.unled]) {
      if (list === undefined) continue;
      for (const re of list) {
        re.lastIndex = at;
        const m = re.exec(normal);
        if (m === null) continue;
        matched = true;
        const start = this.origin[at] as number;
        let end = this.origin[at + m[0].length - 1] as number;
        // As the library counts it: a match ending in a surrogate pair ends after the pair.
        if (end + 1 < text.length && isHigh(text.charCodeAt(end)) && isLow(text.charCodeAt(end + 1))) end++;
        if (!this.inAllowedTerm(text, start, end)) return false;
      }
    }
    return matched;
  }

  /** Whether an allowed term, in ASCII letters of any case, spans text[start..end] (inclusive). */
  private inAllowedTerm(text: string, start: number, end: number): boolean {
    for (const term of this.allowed) {
      const last = Math.min(start, text.length - term.length);
      for (let at = Math.max(0, end - term.length + 1); at <= last; at++) {
        if (asciiLowerEquals(text, at, term)) return true;
      }
    }
    return false;
  }

  private simpleChain(char: number): number {
    let c: number | undefined = char;
    for (const fn of this.simple) {
      c = fn(c);
      if (c === undefined) return -1;
    }
    return c;
  }

  /** The text as the library's blacklist transforms make it (same output, one table look-up a unit). */
  private normalise(text: string): string {
    if (this.buffer.length < text.length * 2) {
      this.buffer = new Uint16Array(text.length * 2);
      this.origin = new Int32Array(text.length * 2);
    }
    const out = this.buffer;
    const origin = this.origin;
    let n = 0;
    let last = -1;
    let run = -1;
    for (let i = 0; i < text.length; i++) {
      const at = i;
      let cp = text.charCodeAt(i);
      let mapped: number;
      if (cp >= 0xd800 && cp <= 0xdbff && i + 1 < text.length) {
        cp = text.codePointAt(i) as number;
        if (cp > 0xffff) i++;
        mapped = this.simpleChain(cp);
      } else {
        mapped = this.table[cp] as number;
      }
      if (mapped < 0) continue;
      if (mapped === last) {
        if (run-- <= 0) continue;
      } else {
        last = mapped;
        run = (mapped < 128 ? (this.keep[mapped] as number) : this.keepOther) - 1;
        if (run < 0) continue;
      }
      if (mapped > 0xffff) {
        origin[n] = at;
        out[n++] = 0xd800 + ((mapped - 0x10000) >> 10);
        origin[n] = at;
        out[n++] = 0xdc00 + ((mapped - 0x10000) & 0x3ff);
      } else {
        origin[n] = at;
        out[n++] = mapped;
      }
    }
    return decode(out, n);
  }
}

/** Places the gate found that the library may reject (allowed look-alikes) before a text counts as clean. */
const MAX_CHECKS = 64;
/** Characters around a gate match given to the library, widened to whole words. */
const CONTEXT = 40;

function around(text: string, start: number, end: number): string {
  let from = Math.max(0, start - CONTEXT);
  let to = Math.min(text.length, end + CONTEXT);
  for (let i = 0; from > 0 && i < 32 && !/\s/.test(text[from - 1] as string); i++) from--;
  for (let i = 0; to < text.length && i < 32 && !/\s/.test(text[to] as string); i++) to++;
  return text.slice(from, to);
}

const UTF16 = new TextDecoder('utf-16le');

function decode(units: Uint16Array, n: number): string {
  return UTF16.decode(units.subarray(0, n));
}

function isHigh(unit: number): boolean {
  return unit >= 0xd800 && unit <= 0xdbff;
}

function isLow(unit: number): boolean {
  return unit >= 0xdc00 && unit <= 0xdfff;
}

/** text.slice(at, at + term.length), ASCII letters lower-cased, equals term (a lower-case ASCII term). */
function asciiLowerEquals(text: string, at: number, term: string): boolean {
  for (let i = 0; i < term.length; i++) {
    let c = text.charCodeAt(at + i);
    if (c >= 0x41 && c <= 0x5a) c += 0x20;
    if (c !== term.charCodeAt(i)) return false;
  }
  return true;
}

/**
 * The library's patterns as one regular expression that matches where any of them does (each compiled
 * the way the library compiles it). Alternatives are grouped by their first letter, so the engine tries
 * one group per position instead of every pattern. Each pattern is also compiled alone (sticky), to tell
 * which ones match at a place the gate found.
 */
function gateRegExps(patterns: readonly ParsedPattern[]): {
  gate: RegExp;
  byLead: Map<string, RegExp[]>;
  unled: RegExp[];
} {
  const groups = new Map<string, string[]>();
  const rest: string[] = [];
  for (const pattern of patterns) {
    const [first, ...others] = pattern.nodes;
    let tail = '';
    for (const node of others) tail += nodeSource(node);
    if (pattern.requireWordBoundaryAtEnd) tail += '\\b';
    if (first?.kind === SyntaxKind.Literal && /^\w$/.test(String.fromCodePoint(first.chars[0] as number))) {
      const [c, ...more] = first.chars;
      const lead = String.fromCodePoint(c as number);
      // `\bx…` is `x` with no word character before it: checked after x by a look-behind.
      const source =
        (pattern.requireWordBoundaryAtStart ? '(?<!\\w.)' : '') +
        (more.length > 0 ? nodeSource({ kind: SyntaxKind.Literal, chars: more }) : '') +
        tail;
      const group = groups.get(lead) ?? [];
      group.push(source);
      groups.set(lead, group);
    } else {
      rest.push((pattern.requireWordBoundaryAtStart ? '\\b' : '') + (first ? nodeSource(first) : '') + tail);
    }
  }
  const alternatives = [...groups].map(([lead, tails]) => `${lead}(?:${tails.join('|')})`);
  const byLead = new Map(
    [...groups].map(([lead, tails]) => [lead, tails.map((tail) => new RegExp(lead + tail, 'ys'))]),
  );
  return {
    gate: new RegExp([...alternatives, ...rest].join('|'), 'gs'),
    byLead,
    unled: rest.map((source) => new RegExp(source, 'ys')),
  };
}

function nodeSource(node: ParsedPattern['nodes'][number]): string {
  switch (node.kind) {
    case SyntaxKind.Literal:
      return String.fromCodePoint(...node.chars).replace(/[[\].*+?^${}()|\\/]/g, '\\$&');
    case SyntaxKind.Optional:
      return `(?:${nodeSource(node.childNode)})?`;
    case SyntaxKind.Wildcard:
      return '.';
  }
}
