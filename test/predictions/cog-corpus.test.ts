/**
 * `npm run cog:corpus` on the shipped corpus (test/fixtures/cog-schemas: Cog 0.0.x-0.9 and Rust-server
 * schema shapes, one folder per model): every example input Python Cog accepts is accepted and sent as
 * expected, every one it refuses is refused naming the field and never reaches the backend, unknown
 * inputs are refused by name (or dropped where the model says so), and only the model whose schema
 * cannot be compiled is offline, and every output keeps its shape with its files (in lists, objects,
 * lists of `$ref` objects) turned into Gantry links. An unlabelled example counts as one Cog accepts.
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import type { CorpusReport } from '../../scripts/cog-corpus.js';

const CORPUS = join(import.meta.dirname, '../fixtures/cog-schemas');

function examplesSaying(cog: 'accepts' | 'refuses'): number {
  let n = 0;
  for (const model of readdirSync(CORPUS)) {
    let files: string[] = [];
    try {
      files = readdirSync(join(CORPUS, model, 'examples'));
    } catch {
      continue;
    }
    for (const file of files) {
      const example = JSON.parse(readFileSync(join(CORPUS, model, 'examples', file), 'utf8'));
      if ((example.cog ?? 'accepts') === cog && !example.unknown) n += 1;
    }
  }
  return n;
}

describe('npm run cog:corpus on the shipped corpus', () => {
  it('accepts everything Python Cog accepts and refuses what it refuses', async () => {
    const run = promisify(execFile);
    const { stdout } = await run(
      process.execPath,
      ['--import', 'tsx', 'scripts/cog-corpus.ts', CORPUS, '--json'],
      { cwd: join(import.meta.dirname, '../..'), maxBuffer: 16 * 1024 * 1024 },
    );
    const report = JSON.parse(stdout) as CorpusReport;
    const by = (verdict: string) => report.results.filter((r) => r.verdict === verdict);

    expect(report.models).toBeGreaterThanOrEqual(20);
    expect(by('false-rejection')).toEqual([]);
    expect(by('false-acceptance')).toEqual([]);
    expect(by('sent-mismatch')).toEqual([]);
    expect(by('output-mismatch')).toEqual([]);
    expect(by('offline-mismatch')).toEqual([]);
    expect(report.acceptance).toBe(1);
    expect(by('refused')).toHaveLength(examplesSaying('refuses'));
    expect(by('accepted')).toHaveLength(examplesSaying('accepts'));
    // The shapes the output check must see through: an unlabelled example is among those counted.
    expect(by('accepted').map((r) => `${r.model}/${r.example}`)).toEqual(
      expect.arrayContaining([
        'coglet-optional-file-list/urls',
        'object-output-files/run',
        'ref-object-list-output/run',
        'labels-list-output/run',
      ]),
    );
    expect(
      by('refused-unknown')
        .map((r) => r.model)
        .sort(),
    ).toEqual(['no-inputs', 'unknown-fields']);
  }, 60_000);
});
