import { readFileSync } from 'node:fs';

/** Bench settings read from the environment; a bad value stops the bench with the variable's name. */

/** An integer in [min, max], or `fallback` when unset or empty. */
export function envInt(name: string, fallback: number, min = 0, max = 10_000_000): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new Error(`${name}: not an integer in [${min}, ${max}]`);
  return n;
}

/** A comma-separated list, trimmed, empty items dropped; undefined when the variable is unset. */
export function envItems(name: string): string[] | undefined {
  const raw = process.env[name];
  if (raw === undefined) return undefined;
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/** A comma-separated list of integers in [1, max] (concurrencies), or `fallback` when unset. */
export function envIntList(name: string, fallback: number[], max: number): number[] {
  const items = envItems(name);
  if (items === undefined) return fallback;
  const out = items.map(Number);
  if (out.some((n) => !Number.isInteger(n) || n < 1 || n > max))
    throw new Error(`${name}: expected e.g. ${fallback.join(',')}`);
  return out;
}

/**
 * The node flags Gantry is started with, as package.json's `start` script gives them (`node <flags>
 * bin/gantry.js serve`), so the bench measures Gantry as it is run.
 */
export function gantryNodeFlags(packageJson: string): string[] {
  const start = (JSON.parse(readFileSync(packageJson, 'utf8')) as { scripts?: { start?: string } }).scripts
    ?.start;
  const words = (start ?? '').split(/\s+/);
  const bin = words.indexOf('bin/gantry.js');
  if (words[0] !== 'node' || bin === -1)
    throw new Error(`${packageJson}: scripts.start is not "node [flags] bin/gantry.js serve"`);
  return words.slice(1, bin);
}
