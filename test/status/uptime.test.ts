/** The uptime math of the status page: timelines from history changes, buckets, the API's combined status. */
import { describe, expect, it } from 'vitest';
import { notModified } from '../../src/status/routes.js';
import {
  apiStatus,
  buckets,
  combine,
  HOUR,
  type Status,
  type Timeline,
  timelineOf,
  total,
  uptimeOf,
  WINDOWS,
  windowStart,
} from '../../src/status/uptime.js';

const MIN = 60_000;
/** A fixed now: 2026-01-10 12:30 UTC. */
const NOW = Date.UTC(2026, 0, 10, 12, 30);
const HOURLY = { key: 'h', buckets: 3, bucketMs: HOUR };
const START = windowStart(HOURLY, NOW); // 10:00

type C = { at: number; from: Status; to: Status };

describe('timelineOf', () => {
  it.each<[string, C[], Status, Status, number]>([
    ['no record: the current status all along', [], 'degraded', 'degraded', 0],
    [
      'time before the first record counts as the status it started from',
      [{ at: START + 10 * MIN, from: 'offline', to: 'operational' }],
      'operational',
      'offline',
      1,
    ],
    [
      'a change before the window gives the status at its start',
      [
        { at: START - 5 * MIN, from: 'operational', to: 'degraded' },
        { at: START + 5 * MIN, from: 'degraded', to: 'operational' },
      ],
      'operational',
      'degraded',
      1,
    ],
    [
      'changes come newest first from the history and are sorted',
      [
        { at: START + 20 * MIN, from: 'offline', to: 'operational' },
        { at: START + 10 * MIN, from: 'operational', to: 'offline' },
      ],
      'operational',
      'operational',
      2,
    ],
  ])('%s', (_name, changes, current, initial, count) => {
    const t = timelineOf(changes, current, START);
    expect(t.initial).toBe(initial);
    expect(t.changes).toHaveLength(count);
    expect(t.changes.map((c) => c.at)).toEqual([...t.changes.map((c) => c.at)].sort((a, b) => a - b));
  });
});

describe('timelineOf, given now: it ends in the status shown now', () => {
  it('a history that lags behind what is shown colours the last bar, makes up no uptime, keeps the past', () => {
    // Recorded: offline 10:10–10:20. Shown now: offline again, not recorded yet.
    const changes: C[] = [
      { at: START + 10 * MIN, from: 'operational', to: 'offline' },
      { at: START + 20 * MIN, from: 'offline', to: 'operational' },
    ];
    const t = timelineOf(changes, 'offline', START, NOW);
    expect(t.changes.at(-1)).toEqual({ at: NOW, to: 'offline' });
    const list = buckets(t, HOURLY, NOW);
    expect(list.map((b) => b.status)).toEqual(['offline', 'operational', 'offline']);
    expect(list.at(-1)?.uptime).toBe(100);
    expect(list[0]?.ms.offline).toBe(10 * MIN);
    // Agreeing with the history: nothing added.
    expect(timelineOf(changes, 'operational', START, NOW).changes).toHaveLength(2);
    // No record at all: the shown status throughout, as before.
    expect(timelineOf([], 'offline', START, NOW)).toEqual({ initial: 'offline', start: START, changes: [] });
  });
});

describe('buckets', () => {
  const tl = (initial: Status, changes: Array<[number, Status]>): Timeline => ({
    initial,
    start: START,
    changes: changes.map(([min, to]) => ({ at: START + min * MIN, to })),
  });

  it.each<[string, Timeline, Array<[Status, number]>]>([
    [
      'always operational: green, 100%',
      tl('operational', []),
      [
        ['operational', 100],
        ['operational', 100],
        ['operational', 100],
      ],
    ],
    [
      // 10:00-10:15 offline (25% of the hour), back at 10:15; the current bucket 12:00-12:30 is partial.
      'offline for a quarter of the first hour',
      tl('operational', [
        [0, 'offline'],
        [15, 'operational'],
      ]),
      [
        ['offline', 75],
        ['operational', 100],
        ['operational', 100],
      ],
    ],
    [
      // degraded from 10:30 to 11:30: degraded counts as up, the colour is the worst held.
      'degraded across a boundary',
      tl('operational', [
        [30, 'degraded'],
        [90, 'operational'],
      ]),
      [
        ['degraded', 100],
        ['degraded', 100],
        ['operational', 100],
      ],
    ],
    [
      // offline from 12:15 to now (12:30): half of the partial current bucket.
      'offline in the current partial bucket',
      tl('operational', [[135, 'offline']]),
      [
        ['operational', 100],
        ['operational', 100],
        ['offline', 50],
      ],
    ],
    [
      'offline since before the window',
      tl('offline', []),
      [
        ['offline', 0],
        ['offline', 0],
        ['offline', 0],
      ],
    ],
  ])('%s', (_name, timeline, expected) => {
    const list = buckets(timeline, HOURLY, NOW);
    expect(list.map((b) => [b.status, b.uptime])).toEqual(expected);
    expect(list[0]?.start).toBe(Date.UTC(2026, 0, 10, 10));
    expect(list[2]?.end).toBe(NOW);
    for (const b of list) {
      expect(b.ms.operational + b.ms.degraded + b.ms.offline).toBe(b.end - b.start);
    }
  });

  it('a window uptime is the share of all its time not offline', () => {
    const list = buckets(
      tl('operational', [
        [0, 'offline'],
        [15, 'operational'],
      ]),
      HOURLY,
      NOW,
    );
    // 15 minutes offline of 150.
    expect(uptimeOf(total(list))).toBe(90);
  });

  it('the three windows: 24 hourly, 7 daily, 90 daily bars, aligned to UTC', () => {
    expect(WINDOWS.map((w) => [w.key, w.buckets, w.bucketMs / HOUR])).toEqual([
      ['24h', 24, 1],
      ['7d', 7, 24],
      ['90d', 90, 24],
    ]);
    const day = WINDOWS[1];
    if (!day) throw new Error('no 7d window');
    expect(windowStart(day, NOW)).toBe(Date.UTC(2026, 0, 4));
  });
});

describe('the API status', () => {
  it.each<[Status[], Status]>([
    [['operational', 'operational'], 'operational'],
    [['operational', 'degraded'], 'degraded'],
    [['operational', 'offline'], 'degraded'],
    [['offline', 'offline'], 'offline'],
    [[], 'operational'],
  ])('%j -> %s', (models, expected) => {
    expect(apiStatus(models)).toBe(expected);
  });

  it('combines the models timelines, one change per API status change', () => {
    const a: Timeline = {
      initial: 'operational',
      start: START,
      changes: [{ at: START + MIN, to: 'offline' }],
    };
    const b: Timeline = {
      initial: 'operational',
      start: START,
      changes: [
        { at: START + 2 * MIN, to: 'offline' },
        { at: START + 3 * MIN, to: 'operational' },
      ],
    };
    expect(combine([a, b], START).changes.map((c) => [(c.at - START) / MIN, c.to])).toEqual([
      [1, 'degraded'],
      [2, 'offline'],
      [3, 'degraded'],
    ]);
  });
});

describe('If-None-Match', () => {
  it.each<[string | undefined, boolean]>([
    [undefined, false],
    ['"abc"', true],
    ['W/"abc"', true],
    ['"x", "abc"', true],
    ['*', true],
    ['"abd"', false],
  ])('%s', (header, expected) => {
    expect(notModified(header, '"abc"')).toBe(expected);
  });
});
