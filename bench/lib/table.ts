/** Text output of the bench: numbers as the tables show them, and the tables. */

export const int0 = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');

/** A text table; the first `leftColumns` columns are left-aligned, the others right-aligned. */
export function table(title: string, header: string[], rows: string[][], leftColumns = 1): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i < leftColumns ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  const rule = widths.map((w) => '-'.repeat(w)).join('  ');
  return [`\n${title}`, line(header), rule, ...rows.map(line)].join('\n');
}
