import type { Incident } from './incidents.js';

/** An incident as the admin API and /status.json answer it (times as ISO 8601). */
export function incidentView(i: Incident) {
  return {
    id: i.id,
    title: i.title,
    components: i.components,
    impact: i.impact,
    status: i.status,
    source: i.source,
    opened_at: new Date(i.openedAt).toISOString(),
    resolved_at: i.resolvedAt === null ? null : new Date(i.resolvedAt).toISOString(),
    updates: i.updates.map((u) => ({
      at: new Date(u.at).toISOString(),
      status: u.status,
      message: u.message,
    })),
  };
}

/** JSON Schema of incidentView (route schemas). */
export const INCIDENT_SCHEMA = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    title: { type: 'string' },
    components: { type: 'array', items: { type: 'string' } },
    impact: { type: 'string', enum: ['degraded', 'offline', 'maintenance'] },
    status: { type: 'string', enum: ['investigating', 'identified', 'monitoring', 'resolved'] },
    source: { type: 'string', enum: ['auto', 'manual'] },
    opened_at: { type: 'string', format: 'date-time' },
    resolved_at: { type: ['string', 'null'], format: 'date-time' },
    updates: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          at: { type: 'string', format: 'date-time' },
          status: { type: 'string' },
          message: { type: 'string' },
        },
      },
    },
  },
} as const;
