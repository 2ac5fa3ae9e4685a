/** The status page's renderings from a snapshot: hostile text stays text, the feed stays well-formed XML. */
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import type { Incident } from '../../src/status/incidents.js';
import { changeId, incidentEntryId, renderAtom, renderHtml, renderJson } from '../../src/status/render.js';
import {
  type ChangeView,
  type ComponentView,
  incidentTimeline,
  type Snapshot,
} from '../../src/status/snapshot.js';

const HOSTILE = `</h3><img src=x onerror=alert(1)> "q" 'a' & ]]> \u0001\u001f`;
const AT = Date.UTC(2026, 0, 10, 12);

function component(id: string, name: string, reason: string | null): ComponentView {
  return {
    id,
    name,
    status: reason === null ? 'operational' : 'offline',
    reason,
    monitored: true,
    uptime: {
      '24h': {
        bucket_seconds: 3600,
        uptime_percent: 50,
        buckets: [
          {
            start: new Date(AT).toISOString(),
            end: new Date(AT + 3_600_000).toISOString(),
            status: 'offline',
            uptime_percent: 50,
            seconds: { operational: 1800, degraded: 0, offline: 1800 },
          },
        ],
      },
    },
  };
}

const change: ChangeView = {
  component: 'evil/x',
  name: HOSTILE,
  at: AT,
  from: 'operational',
  to: 'offline',
  reason: HOSTILE,
  instance: 'host:1',
};

const snapshot: Snapshot = {
  generatedAt: AT,
  historyAvailable: true,
  api: component('api', 'API', '1 of 1 models not operational'),
  console: undefined,
  models: [component('evil/x', HOSTILE, HOSTILE)],
  changes: [change],
  incidentsAvailable: true,
  incidents: [],
  names: new Map([['evil/x', HOSTILE]]),
};

describe('renderings', () => {
  it('HTML: names and reasons are escaped, no script, every bar has a text alternative', () => {
    const html = renderHtml(snapshot);
    expect(html).not.toContain('<img');
    expect(html).toContain(
      '&lt;/h3&gt;&lt;img src=x onerror=alert(1)&gt; &quot;q&quot; &#39;a&#39; &amp; ]]&gt;',
    );
    expect(html).not.toMatch(/<script|<link rel="stylesheet"|src=(?!x)/);
    expect(html).toContain('<span class="sr">2026-01-10 12:00–13:00 UTC: Offline, 50% uptime</span>');
    expect(html).toContain('<html lang="en">');
  });

  it('Atom: well-formed even with control characters, the text comes back as given (minus those)', () => {
    const xml = renderAtom(snapshot, 'http://status.example', 0);
    expect(XMLValidator.validate(xml)).toBe(true);
    const feed = new XMLParser({ ignoreAttributes: false, processEntities: true, htmlEntities: true }).parse(
      xml,
    ).feed as { entry: { id: string; title: string; content: { '#text': string } } };
    expect(feed.entry.title).toBe(`${HOSTILE.replaceAll('\u0001', '').replaceAll('\u001f', '')}: Offline`);
    expect(feed.entry.content['#text']).toContain('went from operational to offline');
    expect(feed.entry.id).toBe(changeId(change));
  });

  it('entry ids are stable per change and differ between changes', () => {
    expect(changeId({ ...change })).toBe(changeId(change));
    expect(changeId({ ...change, at: AT + 1 })).not.toBe(changeId(change));
    expect(changeId(change)).toMatch(
      /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
  });

  it('JSON keeps the hostile text as data', () => {
    const body = JSON.parse(renderJson(snapshot)) as { models: Array<{ name: string }>; status: string };
    expect(body.models[0]?.name).toBe(HOSTILE);
    expect(body.status).toBe('offline');
  });

  it('says so when the history could not be read', () => {
    const missing = { ...snapshot, historyAvailable: false };
    expect(renderHtml(missing)).toContain('The status history cannot be read right now');
    expect(renderHtml(snapshot)).not.toContain('cannot be read');
    expect(JSON.parse(renderJson(missing)).history_available).toBe(false);
  });
});

describe('incidents in the renderings', () => {
  const incident: Incident = {
    id: 'inc_abc',
    title: HOSTILE,
    components: ['evil/x', 'console'],
    impact: 'offline',
    status: 'resolved',
    source: 'manual',
    openedAt: AT,
    resolvedAt: AT + 2000,
    updates: [
      { at: AT, status: 'investigating', message: `opening ${HOSTILE}` },
      { at: AT + 1000, status: 'monitoring', message: 'watching' },
      { at: AT + 2000, status: 'resolved', message: 'done' },
    ],
  };
  const open: Incident = {
    ...incident,
    id: 'inc_open',
    title: 'Still open',
    status: 'investigating',
    resolvedAt: null,
    updates: [incident.updates[0] as Incident['updates'][number]],
  };
  const withIncidents: Snapshot = {
    ...snapshot,
    incidents: [open, incident],
    names: new Map([
      ['evil/x', HOSTILE],
      ['console', 'Console'],
    ]),
  };

  it('the page lists open ones first, then resolved ones with their updates, all escaped', () => {
    const html = renderHtml(withIncidents);
    expect(html.indexOf('Still open')).toBeLessThan(html.indexOf('Recently resolved'));
    expect(html.indexOf('Recently resolved')).toBeLessThan(html.indexOf('watching'));
    expect(html).not.toContain('<img');
    expect(html).toContain('&lt;/h3&gt;&lt;img src=x');
    expect(renderHtml(snapshot)).toContain('No open incidents.');
  });

  it('the feed has one entry per update, parsed back with stable ids, before the status changes', () => {
    const xml = renderAtom(withIncidents, 'http://status.example', 0);
    expect(XMLValidator.validate(xml)).toBe(true);
    const feed = new XMLParser({
      ignoreAttributes: false,
      processEntities: true,
      htmlEntities: true,
      isArray: (n) => n === 'entry',
    }).parse(xml).feed as {
      updated: string;
      entry: Array<{ id: string; title: string }>;
    };
    const clean = HOSTILE.replaceAll('\u0001', '').replaceAll('\u001f', '').trim();
    expect(feed.entry.map((e) => e.title)).toEqual([
      `Incident resolved: ${clean}`,
      `Incident updated: ${clean}`,
      `Incident opened: ${clean}`,
      'Incident opened: Still open',
      `${clean} : Offline`,
    ]);
    expect(feed.entry[0]?.id).toBe(incidentEntryId('inc_abc', 2));
    expect(feed.entry[3]?.id).toBe(incidentEntryId('inc_open', 0));
    expect(incidentEntryId('inc_abc', 0)).not.toBe(incidentEntryId('inc_open', 0));
    expect(feed.updated).toBe(new Date(AT + 2000).toISOString());
    const json = JSON.parse(renderJson(withIncidents)) as {
      incidents: Array<{ id: string; resolved_at: string | null }>;
    };
    expect(json.incidents.map((i) => [i.id, i.resolved_at])).toEqual([
      ['inc_open', null],
      ['inc_abc', new Date(AT + 2000).toISOString()],
    ]);
  });

  it("a component's timeline from incidents: the worst impact of those open at each moment", () => {
    const t = incidentTimeline(
      [
        { ...incident, impact: 'maintenance', openedAt: AT + 10, resolvedAt: AT + 50 },
        { ...incident, impact: 'offline', openedAt: AT + 20, resolvedAt: AT + 30 },
        { ...open, impact: 'degraded', openedAt: AT - 100 },
      ],
      AT,
    );
    expect(t).toEqual({
      initial: 'degraded',
      start: AT,
      changes: [
        { at: AT + 20, to: 'offline' },
        { at: AT + 30, to: 'degraded' },
      ],
    });
  });
});
