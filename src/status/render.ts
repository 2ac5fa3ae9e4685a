import { createHash } from 'node:crypto';
import { incidentView } from './incident-view.js';
import type { Incident, IncidentStatus } from './incidents.js';
import { API_ID, type ChangeView, type ComponentView, type Snapshot, type WindowView } from './snapshot.js';
import { subscribeForm } from './subscribe-form.js';
import type { Status } from './uptime.js';

/** Text for HTML and XML, element content and quoted attributes alike. */
export function escapeMarkup(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ENTITIES[c] ?? c);
}

const ENTITIES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

// XML 1.0 forbids most control characters even as references; a model name or reason never needs them.
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are the characters being removed
const XML_INVALID = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g;

function text(value: string): string {
  return escapeMarkup(value.replace(XML_INVALID, ''));
}

/** /status.json: the snapshot's components (README, "Status page", has the shape). */
export function renderJson(s: Snapshot): string {
  return JSON.stringify({
    generated_at: new Date(s.generatedAt).toISOString(),
    history_available: s.historyAvailable,
    status: s.api.status,
    api: s.api,
    ...(s.console === undefined ? {} : { console: s.console }),
    models: s.models,
    incidents_available: s.incidentsAvailable,
    incidents: s.incidents.map(incidentView),
  });
}

const LABEL: Record<Status, string> = {
  operational: 'Operational',
  degraded: 'Degraded',
  offline: 'Offline',
};

const WINDOW_TITLE: Record<string, string> = {
  '24h': 'Last 24 hours',
  '7d': 'Last 7 days',
  '90d': 'Last 90 days',
};

const CSS = `
body{font:16px/1.5 system-ui,sans-serif;margin:0;color:#1a1a1a;background:#fff}
main{max-width:60rem;margin:0 auto;padding:1rem}
h1{font-size:1.6rem}h2,h3{font-size:1.25rem;margin:.5rem 0}section h2,section h3{margin:0}
section{border:1px solid #ccc;border-radius:6px;padding:1rem;margin:1rem 0}
.head{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:baseline}
.badge{font-weight:600;padding:0 .5rem;border-radius:4px}
.operational .badge,.badge.operational{background:#d8f3dc;color:#1b4332}
.degraded .badge,.badge.degraded{background:#fff3bf;color:#5c3c00}
.offline .badge,.badge.offline{background:#ffd6d6;color:#6a040f}
.reason{margin:.25rem 0}
.incident .badge{background:#eee;color:#1a1a1a}
ol.updates{margin:.5rem 0;padding-left:1.25rem}
figure{margin:.75rem 0}
figcaption{font-size:.9rem}
ol.bars{display:flex;gap:1px;list-style:none;padding:0;margin:.25rem 0;height:2rem}
ol.bars li{flex:1;min-width:2px}
li.operational{background:#2d6a4f}li.degraded{background:#e09f3e}li.offline{background:#c1121f}
.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
details{font-size:.9rem}summary{cursor:pointer}
summary:focus-visible,a:focus-visible{outline:3px solid #1d4ed8;outline-offset:2px}
table{border-collapse:collapse}td,th{padding:0 .5rem;text-align:left}
`;

/** GET /status: the page, without scripts or outside assets. */
export function renderHtml(s: Snapshot, options: { subscribe?: boolean } = {}): string {
  const generated = new Date(s.generatedAt).toISOString();
  const parts = [
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width,initial-scale=1">',
    '<title>Status</title>',
    '<link rel="alternate" type="application/atom+xml" title="Status changes" href="/status/feed.atom">',
    `<style>${CSS}</style></head><body><main>`,
    '<h1>Status</h1>',
    `<p class="${s.api.status}">Overall: <strong class="badge">${LABEL[s.api.status]}</strong></p>`,
    `<p>Updated <time datetime="${generated}">${generated.replace('T', ' ').slice(0, 19)} UTC</time>.`,
    ' Each bar is one hour (24 hours) or one day (7 and 90 days); its colour is the worst status held',
    ' during it, its uptime the share of its time not offline.',
    ' Also as <a href="/status.json">JSON</a> and an <a href="/status/feed.atom">Atom feed</a>.</p>',
    s.historyAvailable
      ? ''
      : '<p role="status"><strong>The status history cannot be read right now:</strong> the bars assume the current status throughout.</p>',
    incidentsHtml(s),
    component(s.api, 'h-api', 'h2'),
    s.console === undefined ? '' : component(s.console, 'h-console', 'h2'),
    '<h2 id="h-models">Models</h2>',
  ];
  if (s.models.length === 0) parts.push('<p>No public models.</p>');
  s.models.forEach((m, i) => {
    parts.push(component(m, `h-model-${i}`, 'h3'));
  });
  parts.push(subscribeForm(options.subscribe), '</main></body></html>\n');
  return parts.join('');
}

function component(c: ComponentView, headingId: string, heading: 'h2' | 'h3'): string {
  const parts = [
    `<section class="${c.status}" aria-labelledby="${headingId}"><div class="head">`,
    `<${heading} id="${headingId}">${text(c.name)}</${heading}>`,
    c.id === API_ID || c.id === 'console' || c.id === c.name ? '' : `<code>${text(c.id)}</code>`,
    `<span class="badge">${LABEL[c.status]}</span></div>`,
    c.reason === null ? '' : `<p class="reason">${text(c.reason)}</p>`,
  ];
  if (!c.monitored) {
    parts.push(
      '<p class="reason">Not monitored: this status is set by the operator; no uptime is measured.</p>',
    );
  }
  for (const [key, w] of Object.entries(c.uptime)) parts.push(windowHtml(c, key, w));
  parts.push('</section>');
  return parts.join('');
}

const INCIDENT_LABEL: Record<IncidentStatus, string> = {
  investigating: 'Investigating',
  identified: 'Identified',
  monitoring: 'Monitoring',
  resolved: 'Resolved',
};

function when(at: number): string {
  const iso = new Date(at).toISOString();
  return `<time datetime="${iso}">${iso.replace('T', ' ').slice(0, 16)} UTC</time>`;
}

/** Open incidents first, then the recently resolved ones, each with its updates (newest first). */
function incidentsHtml(s: Snapshot): string {
  const open = s.incidents.filter((i) => i.resolvedAt === null);
  const resolved = s.incidents.filter((i) => i.resolvedAt !== null);
  const parts = ['<h2 id="h-incidents">Incidents</h2>'];
  if (!s.incidentsAvailable) parts.push('<p role="status">The incidents cannot be read right now.</p>');
  else if (open.length === 0) parts.push('<p>No open incidents.</p>');
  open.forEach((i, n) => {
    parts.push(incidentHtml(s, i, `h-incident-${n}`));
  });
  if (resolved.length > 0) {
    parts.push('<h3 id="h-resolved">Recently resolved</h3>');
    resolved.forEach((i, n) => {
      parts.push(incidentHtml(s, i, `h-resolved-${n}`));
    });
  }
  return parts.join('');
}

function incidentHtml(s: Snapshot, i: Incident, headingId: string): string {
  const heading = i.resolvedAt === null ? 'h3' : 'h4';
  const affected = i.components.map((c) => text(s.names.get(c) ?? c)).join(', ');
  const updates = [...i.updates]
    .reverse()
    .map((u) => `<li><strong>${INCIDENT_LABEL[u.status]}</strong> ${when(u.at)}: ${text(u.message)}</li>`)
    .join('');
  const impact = i.impact === 'maintenance' ? 'Maintenance' : LABEL[i.impact];
  return [
    `<section class="incident ${i.resolvedAt === null ? i.impact : 'resolved'}" aria-labelledby="${headingId}">`,
    `<div class="head"><${heading} id="${headingId}">${text(i.title)}</${heading}>`,
    `<span class="badge">${INCIDENT_LABEL[i.status]}</span></div>`,
    `<p>Affects ${affected}; impact: ${impact}. Opened ${when(i.openedAt)}`,
    i.resolvedAt === null ? '.' : `, resolved ${when(i.resolvedAt)}.`,
    `</p><ol class="updates" reversed>${updates}</ol></section>`,
  ].join('');
}

function windowHtml(c: ComponentView, key: string, w: WindowView): string {
  const title = WINDOW_TITLE[key] ?? key;
  const hourly = w.bucket_seconds < 86_400;
  const label = (start: string, end: string) =>
    hourly ? `${start.slice(0, 16).replace('T', ' ')}–${end.slice(11, 16)} UTC` : start.slice(0, 10);
  const bars = w.buckets
    .map((b) => {
      const alt = `${label(b.start, b.end)}: ${LABEL[b.status]}, ${b.uptime_percent}% uptime`;
      return `<li class="${b.status}" title="${alt}"><span class="sr">${alt}</span></li>`;
    })
    .join('');
  const rows = w.buckets
    .map(
      (b) =>
        `<tr><td>${label(b.start, b.end)}</td><td>${LABEL[b.status]}</td><td>${b.uptime_percent}%</td>` +
        `<td>${b.seconds.degraded}</td><td>${b.seconds.offline}</td></tr>`,
    )
    .join('');
  return [
    `<figure><figcaption>${title}: ${w.uptime_percent}% uptime</figcaption>`,
    `<ol class="bars" aria-label="${title} of ${text(c.name)}, oldest first">${bars}</ol>`,
    `<details><summary>${title} as a table</summary><table><thead><tr><th scope="col">Period</th>`,
    '<th scope="col">Status</th><th scope="col">Uptime</th><th scope="col">Degraded (s)</th>',
    `<th scope="col">Offline (s)</th></tr></thead><tbody>${rows}</tbody></table></details></figure>`,
  ].join('');
}

/**
 * GET /status/feed.atom: one entry per status change (Atom, RFC 4287: feed id/title/updated/author,
 * entries with id/title/updated/content). An entry's id is a UUID-shaped hash of the change, so it
 * stays the same on every render and every instance.
 */
export function renderAtom(s: Snapshot, origin: string, startedAt: number): string {
  const incidentEntries = s.incidents.flatMap((i) => i.updates.map((u, n) => ({ i, n, at: u.at })));
  const newest = Math.max(s.changes[0]?.at ?? startedAt, ...incidentEntries.map((e) => e.at));
  const updated = new Date(newest).toISOString();
  const parts = [
    '<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">',
    `<id>${text(`${origin}/status/feed.atom`)}</id>`,
    '<title>Status changes</title>',
    `<updated>${updated}</updated>`,
    '<author><name>Gantry</name></author>',
    `<link rel="self" type="application/atom+xml" href="${text(`${origin}/status/feed.atom`)}"/>`,
    `<link rel="alternate" type="text/html" href="${text(`${origin}/status`)}"/>`,
  ];
  // Incident entries first (newest first), then the status changes.
  incidentEntries.sort((x, y) => y.at - x.at || y.n - x.n || x.i.id.localeCompare(y.i.id));
  for (const e of incidentEntries) parts.push(incidentEntry(s, e.i, e.n, origin));
  for (const c of s.changes) parts.push(entry(c, origin));
  parts.push('</feed>\n');
  return parts.join('');
}

/** One update of an incident: the first opened it, one with status `resolved` closed it. */
function incidentEntry(s: Snapshot, i: Incident, n: number, origin: string): string {
  const u = i.updates[n] as Incident['updates'][number];
  const at = new Date(u.at).toISOString();
  const kind = n === 0 ? 'opened' : u.status === 'resolved' ? 'resolved' : 'updated';
  const title = `Incident ${kind}: ${i.title}`;
  const affected = i.components.map((c) => s.names.get(c) ?? c).join(', ');
  const content = `${INCIDENT_LABEL[u.status]} (${affected}; impact ${i.impact}) at ${at}: ${u.message}`;
  return [
    `<entry><id>${incidentEntryId(i.id, n)}</id><title>${text(title)}</title><updated>${at}</updated>`,
    `<published>${at}</published>`,
    `<link rel="alternate" type="text/html" href="${text(`${origin}/status`)}"/>`,
    `<category term="incident"/><category term="${kind}"/>`,
    `<content type="text">${text(content)}</content></entry>`,
  ].join('');
}

/** The feed id of an incident's n-th update: the same on every render and every instance. */
export function incidentEntryId(incidentId: string, n: number): string {
  return uuidOf(JSON.stringify(['incident', incidentId, n]));
}

function entry(c: ChangeView, origin: string): string {
  const at = new Date(c.at).toISOString();
  const title = `${c.name}: ${LABEL[c.to]}`;
  const content = `${c.name} (${c.component}) went from ${c.from} to ${c.to} at ${at}: ${c.reason}`;
  return [
    `<entry><id>${changeId(c)}</id><title>${text(title)}</title><updated>${at}</updated>`,
    `<link rel="alternate" type="text/html" href="${text(`${origin}/status`)}"/>`,
    `<category term="${text(c.to)}"/>`,
    `<content type="text">${text(content)}</content></entry>`,
  ].join('');
}

export function changeId(c: ChangeView): string {
  return uuidOf(JSON.stringify([c.component, c.at, c.from, c.to, c.instance]));
}

function uuidOf(input: string): string {
  const hex = createHash('sha256').update(input).digest('hex');
  // Version 5-style bits so it reads as a UUID (the hash is not SHA-1, the id only needs to be stable).
  const variant = ((Number.parseInt(hex[16] ?? '0', 16) & 0x3) | 0x8).toString(16);
  return `urn:uuid:${hex.slice(0, 8)}-${hex.slice(8, 12)}-5${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}
