/**
 * Reads a V8 .cpuprofile (node --cpu-prof) and tells where the time went: top functions by self time, and
 * self time grouped by area (Gantry's own files, each npm package, node internals, GC, idle).
 *
 * usage: node --import tsx bench/lib/profile.ts FILE.cpuprofile [TOP]
 *        node --import tsx bench/lib/profile.ts FILE.cpuprofile --callers FUNCTION_NAME
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface FunctionCost {
  name: string;
  where: string;
  area: string;
  selfMs: number;
  /** Share of the busy time (everything but idle). */
  selfPct: number;
}

export interface AreaCost {
  area: string;
  selfMs: number;
  selfPct: number;
}

export interface ProfileSummary {
  file: string;
  wallMs: number;
  busyMs: number;
  idleMs: number;
  top: FunctionCost[];
  areas: AreaCost[];
  /** Gantry's own functions by inclusive time (self + everything they call), each sample counted once. */
  gantryInclusive: FunctionCost[];
}

/** Where a frame's code lives: a Gantry file, an npm package, node itself, or a V8 pseudo-frame. */
export function areaOf(frame: CallFrame): string {
  const url = frame.url;
  if (url === '') {
    const fn = frame.functionName;
    if (fn === '(idle)' || fn === '(program)' || fn === '(garbage collector)' || fn === '(root)') return fn;
    return '(native)';
  }
  const nm = url.lastIndexOf('/node_modules/');
  if (nm !== -1) {
    const rest = url.slice(nm + '/node_modules/'.length).split('/');
    return rest[0]?.startsWith('@') ? `${rest[0]}/${rest[1]}` : (rest[0] ?? url);
  }
  if (url.startsWith('node:')) return 'node internals';
  const dist = url.indexOf('/dist/');
  if (dist !== -1) return `gantry ${url.slice(dist + '/dist/'.length).replace(/\.js$/, '')}`;
  return url.replace(/^file:\/\//, '');
}

function shortUrl(url: string): string {
  if (url === '') return '';
  const nm = url.lastIndexOf('/node_modules/');
  if (nm !== -1) return url.slice(nm + '/node_modules/'.length);
  const dist = url.indexOf('/dist/');
  if (dist !== -1) return url.slice(dist + 1);
  return url.replace(/^file:\/\//, '');
}

export function summarizeProfile(file: string, topN = 25): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map<number, ProfileNode>();
  for (const node of profile.nodes) byId.set(node.id, node);

  // Self time per node: each sample's time delta is charged to the node that was on top of the stack.
  const selfUs = new Map<number, number>();
  const n = Math.min(profile.samples.length, profile.timeDeltas.length);
  for (let i = 0; i < n; i++) {
    // timeDeltas[i] is the time since the previous sample; it belongs to sample i-1's frame.
    const id = profile.samples[i === 0 ? 0 : i - 1] as number;
    selfUs.set(id, (selfUs.get(id) ?? 0) + Math.max(0, profile.timeDeltas[i] as number));
  }

  // Inclusive time of Gantry's own functions: walk each sample's stack once, counting each function once.
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const inclusive = new Map<string, { name: string; where: string; area: string; us: number }>();
  for (const [id, us] of selfUs) {
    const seen = new Set<string>();
    let cursor: number | undefined = id;
    for (let depth = 0; cursor !== undefined && depth < 2_000; depth++) {
      const node = byId.get(cursor);
      if (!node) break;
      const frame = node.callFrame;
      if (frame.url.includes('/dist/') && !frame.url.includes('/node_modules/')) {
        const where = `${shortUrl(frame.url)}:${frame.lineNumber + 1}`;
        const name = frame.functionName || '(anonymous)';
        const key = `${name}\u0000${where}`;
        if (!seen.has(key)) {
          seen.add(key);
          const entry = inclusive.get(key) ?? { name, where, area: areaOf(frame), us: 0 };
          entry.us += us;
          inclusive.set(key, entry);
        }
      }
      cursor = parent.get(cursor);
    }
  }

  const fns = new Map<string, { name: string; where: string; area: string; us: number }>();
  const areas = new Map<string, number>();
  let idleUs = 0;
  let totalUs = 0;
  for (const [id, us] of selfUs) {
    const node = byId.get(id);
    if (!node) continue;
    const frame = node.callFrame;
    const area = areaOf(frame);
    totalUs += us;
    if (area === '(idle)') {
      idleUs += us;
      continue;
    }
    const where = frame.url === '' ? '' : `${shortUrl(frame.url)}:${frame.lineNumber + 1}`;
    const name = frame.functionName || '(anonymous)';
    const key = `${name}\u0000${where}`;
    const entry = fns.get(key) ?? { name, where, area, us: 0 };
    entry.us += us;
    fns.set(key, entry);
    areas.set(area, (areas.get(area) ?? 0) + us);
  }
  const busyUs = totalUs - idleUs;
  const pct = (us: number) => (busyUs > 0 ? Math.round((us / busyUs) * 1000) / 10 : 0);
  const ms = (us: number) => Math.round(us / 100) / 10;
  return {
    file,
    wallMs: ms(profile.endTime - profile.startTime),
    busyMs: ms(busyUs),
    idleMs: ms(idleUs),
    top: [...fns.values()]
      .sort((a, b) => b.us - a.us)
      .slice(0, topN)
      .map((f) => ({ name: f.name, where: f.where, area: f.area, selfMs: ms(f.us), selfPct: pct(f.us) })),
    areas: [...areas.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([area, us]) => ({ area, selfMs: ms(us), selfPct: pct(us) })),
    gantryInclusive: [...inclusive.values()]
      .sort((a, b) => b.us - a.us)
      .slice(0, topN)
      .map((f) => ({ name: f.name, where: f.where, area: f.area, selfMs: ms(f.us), selfPct: pct(f.us) })),
  };
}

export function formatProfile(s: ProfileSummary, topAreas = 20): string {
  const lines: string[] = [];
  lines.push(
    `CPU profile ${s.file}: wall ${(s.wallMs / 1000).toFixed(1)} s, busy ${(s.busyMs / 1000).toFixed(1)} s` +
      ` (idle ${(s.idleMs / 1000).toFixed(1)} s); percentages are of busy time`,
  );
  lines.push('', 'Self time by area:');
  for (const a of s.areas.slice(0, topAreas)) {
    lines.push(`  ${a.selfPct.toFixed(1).padStart(5)} %  ${a.selfMs.toFixed(0).padStart(7)} ms  ${a.area}`);
  }
  lines.push('', 'Top functions by self time:');
  for (const f of s.top) {
    lines.push(
      `  ${f.selfPct.toFixed(1).padStart(5)} %  ${f.selfMs.toFixed(0).padStart(7)} ms  ${f.name}  ${f.where}`,
    );
  }
  lines.push('', "Gantry's own functions by inclusive time (self + callees):");
  for (const f of s.gantryInclusive) {
    lines.push(
      `  ${f.selfPct.toFixed(1).padStart(5)} %  ${f.selfMs.toFixed(0).padStart(7)} ms  ${f.name}  ${f.where}`,
    );
  }
  return lines.join('\n');
}

/**
 * Where a function is called from: the `depth` frames above each sample whose top frame is `name`,
 * grouped, heaviest first. For digging into one hot function (e.g. `writev`, `createAbortSignal`).
 */
export function callersOf(
  file: string,
  name: string,
  depth = Number(process.env.DEPTH) || 6,
  top = 8,
): string {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const stacks = new Map<string, number>();
  let totalUs = 0;
  const n = Math.min(profile.samples.length, profile.timeDeltas.length);
  for (let i = 1; i < n; i++) {
    const id = profile.samples[i - 1] as number;
    if (byId.get(id)?.callFrame.functionName !== name) continue;
    const us = Math.max(0, profile.timeDeltas[i] as number);
    totalUs += us;
    const frames: string[] = [];
    let cursor = parent.get(id);
    for (let d = 0; cursor !== undefined && d < depth; d++) {
      const frame = byId.get(cursor)?.callFrame;
      if (!frame) break;
      frames.push(`${frame.functionName || '(anonymous)'} ${shortUrl(frame.url)}:${frame.lineNumber + 1}`);
      cursor = parent.get(cursor);
    }
    const key = frames.join('\n      <- ');
    stacks.set(key, (stacks.get(key) ?? 0) + us);
  }
  const lines = [`${name}: ${(totalUs / 1000).toFixed(0)} ms self time, called from:`];
  for (const [stack, us] of [...stacks.entries()].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    lines.push(`  ${((us / Math.max(1, totalUs)) * 100).toFixed(1).padStart(5)} %  ${stack}`);
  }
  return lines.join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [file, arg, name] = process.argv.slice(2);
  if (!file) {
    process.stderr.write(
      'usage: node --import tsx bench/lib/profile.ts FILE.cpuprofile [TOP]\n' +
        '       node --import tsx bench/lib/profile.ts FILE.cpuprofile --callers FUNCTION_NAME\n',
    );
    process.exit(2);
  }
  if (arg === '--callers' && name) process.stdout.write(`${callersOf(file, name)}\n`);
  else process.stdout.write(`${formatProfile(summarizeProfile(file, Number(arg) || 30))}\n`);
}
