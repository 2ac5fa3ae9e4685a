import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..');

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => join(entry.parentPath, entry.name));
}

describe('layers run one way', () => {
  it('providers/ imports nothing from src/ (adapters stand on their own; src/ maps their errors)', () => {
    const files = sources('providers');
    expect(files.length).toBeGreaterThan(10);
    const offending = files.filter((file) => /from '(\.\.\/)+src\//.test(readFileSync(file, 'utf8')));
    expect(offending.map((file) => file.slice(ROOT.length + 1))).toEqual([]);
  });
});
