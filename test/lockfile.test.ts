/**
 * package-lock.json agrees with package.json, read from the files alone (no network, no npm): a change to
 * package.json without `npm install` fails here, in seconds, instead of in CI's `npm ci` or as a lock that
 * the README's quick start would rewrite. Also: what `npm start` and `npm test` run never installs.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const ROOT = new URL('..', import.meta.url).pathname;

interface Manifest {
  name?: string;
  version?: string;
  license?: string;
  bin?: Record<string, string>;
  engines?: Record<string, string>;
  scripts?: Record<string, string>;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

interface Lock {
  name?: string;
  version?: string;
  lockfileVersion: number;
  packages: Record<string, Manifest>;
}

const pkg = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as Manifest;
const lock = JSON.parse(readFileSync(`${ROOT}package-lock.json`, 'utf8')) as Lock;

const DEPENDENCY_FIELDS = [
  'dependencies',
  'devDependencies',
  'optionalDependencies',
  'peerDependencies',
] as const;

/** The version triple of `x.y.z` (a prerelease or build suffix is ignored: none is locked here). */
function triple(version: string): [number, number, number] {
  const match = /^(\d+)\.(\d+)\.(\d+)/.exec(version);
  if (!match) throw new Error(`not a version: ${version}`);
  return [Number(match[1]), Number(match[2]), Number(match[3])];
}

function compare(a: [number, number, number], b: [number, number, number]): number {
  return a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
}

/**
 * Whether `version` satisfies `range`, for the two range forms package.json uses: an exact version and a
 * caret range. Any other form fails the test, so that it is taught the new form rather than skipping it.
 */
function satisfies(version: string, range: string): boolean {
  if (/^\d+\.\d+\.\d+$/.test(range)) return version === range;
  const caret = /^\^(\d+\.\d+\.\d+)$/.exec(range);
  if (!caret?.[1]) throw new Error(`range form not handled by this test: ${range}`);
  const low = triple(caret[1]);
  const v = triple(version);
  if (compare(v, low) < 0) return false;
  // ^1.2.3 := <2.0.0, ^0.2.3 := <0.3.0, ^0.0.3 := <0.0.4
  if (low[0] > 0) return v[0] === low[0];
  if (low[1] > 0) return v[0] === 0 && v[1] === low[1];
  return v[0] === 0 && v[1] === 0 && v[2] === low[2];
}

describe('package-lock.json', () => {
  it('is a lockfile npm ci reads (version 2 or 3, with a packages map)', () => {
    expect(lock.lockfileVersion).toBeGreaterThanOrEqual(2);
    expect(lock.packages['']).toBeDefined();
  });

  it("has package.json's name, version, licence, bin and engines in its root entry", () => {
    const root = lock.packages[''] as Manifest;
    expect({ name: lock.name, version: lock.version }).toEqual({ name: pkg.name, version: pkg.version });
    expect({
      name: root.name,
      version: root.version,
      license: root.license,
      bin: root.bin,
      engines: root.engines,
    }).toEqual({
      name: pkg.name,
      version: pkg.version,
      license: pkg.license,
      bin: pkg.bin,
      engines: pkg.engines,
    });
  });

  it("lists exactly package.json's dependencies, with the same ranges, in its root entry", () => {
    const root = lock.packages[''] as Manifest;
    for (const field of DEPENDENCY_FIELDS) {
      expect({ field, ranges: root[field] ?? {} }).toEqual({ field, ranges: pkg[field] ?? {} });
    }
  });

  it('locks a version of every direct dependency that its range accepts', () => {
    const wrong: string[] = [];
    for (const field of ['dependencies', 'devDependencies'] as const) {
      for (const [name, range] of Object.entries(pkg[field] ?? {})) {
        const locked = lock.packages[`node_modules/${name}`];
        if (!locked?.version) wrong.push(`${name}: not in the lock`);
        else if (!satisfies(locked.version, range))
          wrong.push(`${name}: locked ${locked.version}, wants ${range}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('the range check itself tells a match from a miss', () => {
    expect(satisfies('1.4.2', '^1.2.3')).toBe(true);
    expect(satisfies('2.0.0', '^1.2.3')).toBe(false);
    expect(satisfies('1.2.2', '^1.2.3')).toBe(false);
    expect(satisfies('0.5.29', '^0.5.2')).toBe(true);
    expect(satisfies('0.6.0', '^0.5.2')).toBe(false);
    expect(satisfies('4.22.0', '4.22.0')).toBe(true);
    expect(satisfies('4.22.1', '4.22.0')).toBe(false);
  });
});

describe('npm start and npm test', () => {
  /** The scripts npm runs for `npm run <name>`, its pre and post scripts and the `npm run`s they call. */
  function scriptsRunBy(name: string, seen = new Set<string>()): string[] {
    const out: string[] = [];
    for (const step of [`pre${name}`, name, `post${name}`]) {
      const command = pkg.scripts?.[step];
      if (command === undefined || seen.has(step)) continue;
      seen.add(step);
      out.push(command);
      for (const match of command.matchAll(/\bnpm\s+(?:run(?:-script)?\s+([\w:-]+)|(start|test)\b)/g)) {
        const called = match[1] ?? match[2];
        if (called) out.push(...scriptsRunBy(called, seen));
      }
    }
    return out;
  }

  it('never install anything, so they cannot rewrite the lock', () => {
    for (const name of ['start', 'test']) {
      const commands = scriptsRunBy(name);
      expect(commands.length).toBeGreaterThan(0);
      for (const command of commands) {
        expect(command).not.toMatch(/\b(?:npm|pnpm|yarn)\s+(?:install|i|ci|add|update|up|dedupe|prune)\b/);
        expect(command).not.toMatch(/\bnpx\b/);
      }
    }
  });
});
