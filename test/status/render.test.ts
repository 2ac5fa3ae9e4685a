/** The status page's renderings from a snapshot: hostile text stays text, the feed stays well-formed XML. */
import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import { changeId, renderAtom, renderHtml, renderJson } from '../../src/status/render.js';
import type { ChangeView, ComponentView, Snapshot } from '../../src/status/snapshot.js';

const HOSTILE = `</h3><img src=x onerror=alert(1)> "q" 'a' & ]]> \u0001\u001f`;
const AT = Date.UTC(2026, 0, 10, 12);

function component(id: string, name: string, reason: string | null): ComponentView {
  return {
    id,
    name,
    status: reason === null ? 'operational' : 'offline',
    reason,
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
