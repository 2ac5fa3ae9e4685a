/**
 * `npm run safety:eval [-- --failures] [-- --json]`: the offline classifier (src/safety/offline) against
 * the labelled set test/fixtures/safety/labelled.jsonl; prints precision and recall per category, for
 * the development part, the held-out part (every 5th line, not looked at while writing the rules) and
 * the whole set, then per source (prompt, document, completion) on the whole set, and exits 1 when the
 * whole set is below a category's floor (FLOORS; README, "Classifiers"). `--failures` lists the
 * development part's misses and false alarms (never the held-out part's).
 *
 * `npm run safety:bench` (`--bench`): the median and p99 microseconds of one classify of a 1 KB prompt,
 * and of 32 short completion windows (as a blocked-mode stream checks them), on this machine.
 *
 * A line: {"text", "source": "prompt" | "document" | "completion", "labels": {...}}. Labels: `jailbreak`
 * (prompts), `indirect_attack` (documents), `profanity`: true; `pii`: the kinds present (["email", …]);
 * `hate`, `sexual`, `violence`, `self_harm`: "low" | "medium" | "high". An absent label is negative or
 * safe. A severity category counts as positive at >= medium (the policies' default threshold), and is
 * also reported at >= low.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import {
  HARM_CATEGORIES,
  type HarmCategory,
  PII_KINDS,
  type PiiKind,
  type Severity,
  severityRank,
} from '../src/safety/categories.js';
import type { Findings, TextClassifier, TextSource } from '../src/safety/classifier.js';
import { offlineClassifier } from '../src/safety/offline/index.js';
import { TextWindows } from '../src/safety/window.js';

export interface LabelledLine {
  text: string;
  source: TextSource;
  labels: {
    jailbreak?: boolean;
    indirect_attack?: boolean;
    profanity?: boolean;
    pii?: PiiKind[];
  } & Partial<Record<HarmCategory, Exclude<Severity, 'safe'>>>;
}

export const SET_PATH = resolve(import.meta.dirname, '..', 'test', 'fixtures', 'safety', 'labelled.jsonl');

export function loadSet(path = SET_PATH): LabelledLine[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as LabelledLine);
}

/** The held-out part: every 5th line (indexes 4, 9, …). */
export function isHeldOut(index: number): boolean {
  return index % 5 === 4;
}

/** One binary question asked of every line it applies to. */
interface Question {
  name: string;
  applies(line: LabelledLine): boolean;
  expected(line: LabelledLine): boolean;
  predicted(findings: Findings, line: LabelledLine): boolean;
}

const atLeast = (s: Severity | undefined, floor: Severity) =>
  s !== undefined && severityRank(s) >= severityRank(floor);

export const QUESTIONS: readonly Question[] = [
  {
    name: 'jailbreak',
    applies: (l) => l.source === 'prompt',
    expected: (l) => l.labels.jailbreak === true,
    predicted: (f) => f.detected.jailbreak === true,
  },
  {
    name: 'indirect_attack',
    applies: (l) => l.source === 'document',
    expected: (l) => l.labels.indirect_attack === true,
    predicted: (f) => f.detected.indirect_attack === true,
  },
  {
    name: 'profanity',
    applies: () => true,
    expected: (l) => l.labels.profanity === true,
    predicted: (f) => f.detected.profanity === true,
  },
  {
    name: 'pii',
    applies: () => true,
    expected: (l) => (l.labels.pii ?? []).length > 0,
    predicted: (f) => f.detected.pii === true,
  },
  ...PII_KINDS.map(
    (kind): Question => ({
      name: `pii.${kind}`,
      applies: () => true,
      expected: (l) => (l.labels.pii ?? []).includes(kind),
      predicted: (f) => (f.pii ?? []).some((s) => s.kind === kind),
    }),
  ),
  ...HARM_CATEGORIES.flatMap((category) =>
    (['medium', 'low'] as const).map(
      (floor): Question => ({
        name: floor === 'medium' ? category : `${category}>=low`,
        applies: () => true,
        expected: (l) => atLeast(l.labels[category], floor),
        predicted: (f) => atLeast(f.harm[category], floor),
      }),
    ),
  ),
];

/**
 * The floors the whole set must reach (precision, recall), stated in the README ("Classifiers"): what
 * the rules reach with a margin, not what a trained model would.
 */
export const FLOORS: Readonly<Record<string, { precision: number; recall: number }>> = {
  jailbreak: { precision: 0.9, recall: 0.8 },
  indirect_attack: { precision: 0.9, recall: 0.8 },
  profanity: { precision: 0.85, recall: 0.85 },
  pii: { precision: 0.9, recall: 0.85 },
  hate: { precision: 0.75, recall: 0.6 },
  sexual: { precision: 0.75, recall: 0.6 },
  violence: { precision: 0.75, recall: 0.6 },
  self_harm: { precision: 0.75, recall: 0.6 },
};

export interface Score {
  tp: number;
  fp: number;
  fn: number;
  precision: number;
  recall: number;
}

export interface Report {
  /** By part (dev, held_out, all), then by question. */
  parts: Record<'dev' | 'held_out' | 'all', Record<string, Score>>;
  /** The whole set by the lines' source, then by question. */
  sources: Record<TextSource, Record<string, Score>>;
  /** Development lines answered wrongly: index, question, expected. */
  failures: Array<{ index: number; question: string; expected: boolean; text: string }>;
  /** Categories below their floor on the whole set. */
  below: string[];
}

export function evaluateSet(classifier: TextClassifier, lines: readonly LabelledLine[]): Report {
  const empty = () => Object.fromEntries(QUESTIONS.map((q) => [q.name, { tp: 0, fp: 0, fn: 0 }]));
  const counts = { dev: empty(), held_out: empty(), all: empty() } as Record<
    'dev' | 'held_out' | 'all',
    Record<string, { tp: number; fp: number; fn: number }>
  >;
  const bySource = { prompt: empty(), document: empty(), completion: empty() } as Record<
    TextSource,
    Record<string, { tp: number; fp: number; fn: number }>
  >;
  const failures: Report['failures'] = [];
  lines.forEach((line, index) => {
    const findings = classifier.classify(line.text, line.source) as Findings;
    const part = isHeldOut(index) ? 'held_out' : 'dev';
    for (const q of QUESTIONS) {
      if (!q.applies(line)) continue;
      const expected = q.expected(line);
      const predicted = q.predicted(findings, line);
      for (const c of [counts[part][q.name], counts.all[q.name], bySource[line.source][q.name]]) {
        if (c === undefined) continue;
        if (expected && predicted) c.tp++;
        else if (predicted) c.fp++;
        else if (expected) c.fn++;
      }
      if (expected !== predicted && part === 'dev')
        failures.push({ index, question: q.name, expected, text: line.text });
    }
  });
  const score = (c: { tp: number; fp: number; fn: number }): Score => ({
    ...c,
    precision: c.tp + c.fp === 0 ? 1 : c.tp / (c.tp + c.fp),
    recall: c.tp + c.fn === 0 ? 1 : c.tp / (c.tp + c.fn),
  });
  const parts = Object.fromEntries(
    Object.entries(counts).map(([part, byQ]) => [
      part,
      Object.fromEntries(Object.entries(byQ).map(([q, c]) => [q, score(c)])),
    ]),
  ) as Report['parts'];
  const sources = Object.fromEntries(
    Object.entries(bySource).map(([source, byQ]) => [
      source,
      Object.fromEntries(Object.entries(byQ).map(([q, c]) => [q, score(c)])),
    ]),
  ) as Report['sources'];
  const below = Object.entries(FLOORS)
    .filter(([q, floor]) => {
      const s = parts.all[q] as Score;
      return s.precision < floor.precision || s.recall < floor.recall;
    })
    .map(([q]) => q);
  return { parts, sources, failures, below };
}

function printReport(report: Report, lines: readonly LabelledLine[]): void {
  const held = lines.filter((_, i) => isHeldOut(i)).length;
  process.stdout.write(
    `labelled set: ${lines.length} lines (${lines.length - held} development, ${held} held out)\n\n`,
  );
  const pct = (n: number) => n.toFixed(2).padStart(5);
  process.stdout.write(
    `${'category'.padEnd(22)}${'dev P'.padStart(7)}${'dev R'.padStart(7)}${'held P'.padStart(8)}${'held R'.padStart(8)}${'all P'.padStart(7)}${'all R'.padStart(7)}   tp  fp  fn   floor (P, R)\n`,
  );
  for (const q of QUESTIONS) {
    const d = report.parts.dev[q.name] as Score;
    const h = report.parts.held_out[q.name] as Score;
    const a = report.parts.all[q.name] as Score;
    const floor = FLOORS[q.name];
    process.stdout.write(
      `${q.name.padEnd(22)}  ${pct(d.precision)}  ${pct(d.recall)}   ${pct(h.precision)}   ${pct(h.recall)}  ${pct(a.precision)}  ${pct(a.recall)}  ${String(a.tp).padStart(3)} ${String(a.fp).padStart(3)} ${String(a.fn).padStart(3)}   ${floor ? `${floor.precision}, ${floor.recall}${report.below.includes(q.name) ? '  BELOW' : ''}` : ''}\n`,
    );
  }
  // Per source, the floored questions and the severities at >= low: P / R (positives), on the whole set.
  const sources = ['prompt', 'document', 'completion'] as const;
  const counted = sources.map((s) => lines.filter((l) => l.source === s).length);
  process.stdout.write(
    `\nby source, whole set: P / R (positives)\n${'category'.padEnd(22)}${sources.map((s, i) => `${s} (${counted[i]})`.padStart(20)).join('')}\n`,
  );
  for (const q of QUESTIONS) {
    if (FLOORS[q.name] === undefined && !q.name.endsWith('>=low')) continue;
    const cells = sources.map((source) => {
      const c = report.sources[source][q.name] as Score;
      const positives = c.tp + c.fn;
      return (
        c.tp + c.fp + c.fn === 0 ? '-' : `${pct(c.precision)} / ${pct(c.recall)} (${positives})`
      ).padStart(20);
    });
    process.stdout.write(`${q.name.padEnd(22)}${cells.join('')}\n`);
  }
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] as number;
}

/**
 * Median and p99 wall-clock microseconds of `run`, after a warm-up, and the mean CPU microseconds this
 * process spent per run (steadier than wall time on a machine that other work shares).
 */
function time(run: () => void, iterations: number): { median: number; p99: number; cpu: number } {
  for (let i = 0; i < Math.min(500, iterations); i++) run();
  const samples: number[] = [];
  const cpu = process.cpuUsage();
  for (let i = 0; i < iterations; i++) {
    const start = process.hrtime.bigint();
    run();
    samples.push(Number(process.hrtime.bigint() - start) / 1000);
  }
  const used = process.cpuUsage(cpu);
  samples.sort((a, b) => a - b);
  return {
    median: percentile(samples, 0.5),
    p99: percentile(samples, 0.99),
    cpu: (used.user + used.system) / iterations,
  };
}

/** About 1 KB of the set's lines (joined with spaces), starting at line `from`. */
function kilobyte(lines: readonly LabelledLine[], from: number): string {
  let text = '';
  for (let i = from; text.length < 1024; i = (i + 1) % lines.length)
    text += `${(lines[i] as LabelledLine).text} `;
  return text.slice(0, 1024);
}

export function bench(lines: readonly LabelledLine[]): void {
  const classifier = offlineClassifier();
  const benign = lines.filter((l) => Object.keys(l.labels).length === 0);
  const texts = {
    'benign prose': kilobyte(benign, 0),
    'mixed (labelled set)': kilobyte(lines, 0),
    code: `${'function add(a: number, b: number): number {\n  return a + b; // 42\n}\n'.repeat(20)}`.slice(
      0,
      1024,
    ),
  };
  process.stdout.write('one classify of a 1 KB prompt (µs):\n');
  for (const [name, text] of Object.entries(texts)) {
    const t = time(() => classifier.classify(text, 'prompt'), 5000);
    process.stdout.write(
      `  ${name.padEnd(22)} median ${t.median.toFixed(1).padStart(6)}  p99 ${t.p99.toFixed(1).padStart(7)}  mean CPU ${t.cpu.toFixed(1).padStart(6)}\n`,
    );
  }
  // A completion streamed in 32 windows of 32 characters; each checked with the 64 before it.
  const completion = kilobyte(benign, 7);
  const windows = new TextWindows(32);
  const batch: string[] = [];
  for (let i = 0; i < completion.length; i += 8) {
    if (windows.add(completion.slice(i, i + 8))) batch.push(windows.take().text);
  }
  const t = time(() => {
    for (const w of batch.slice(0, 32)) classifier.classify(w, 'completion');
  }, 2000);
  process.stdout.write(
    `32 completion windows of 32 chars (+64 overlap) (µs): median ${t.median.toFixed(1)}  p99 ${t.p99.toFixed(1)}  mean CPU ${t.cpu.toFixed(1)}  (median ${(t.median / 32).toFixed(1)} per window)\n`,
  );
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const args = process.argv.slice(2);
  const lines = loadSet();
  if (args.includes('--bench')) {
    bench(lines);
  } else {
    const report = evaluateSet(offlineClassifier(), lines);
    if (args.includes('--json')) process.stdout.write(`${JSON.stringify(report.parts, null, 2)}\n`);
    else printReport(report, lines);
    if (args.includes('--failures')) {
      process.stdout.write('\ndevelopment-part failures (held-out lines are not shown):\n');
      for (const f of report.failures)
        process.stdout.write(
          `  #${f.index} ${f.question} expected ${f.expected}: ${f.text.replace(/\n/g, '\\n').slice(0, 140)}\n`,
        );
    }
    if (report.below.length > 0) {
      process.stderr.write(`below the floor: ${report.below.join(', ')}\n`);
      process.exitCode = 1;
    }
  }
}
