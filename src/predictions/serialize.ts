import { REDACTED } from './input-schema.js';
import type { PredictionRecord, StoredOutput } from './types.js';

export interface SerializeContext {
  /** Absolute origin of this API, e.g. `https://gantry.example.com`: the base of `urls` and file links. */
  publicUrl: string;
  /** Signs an output file's link, valid until `expiresAt` (epoch seconds). */
  fileUrl(key: string, expiresAt: number): string;
  /** How long output files are kept after completion. */
  retentionMs: number;
  now?: number;
}

/** The Prediction object of spec 2.3, exactly as the API returns it and webhooks carry it. */
export function serializePrediction(
  record: PredictionRecord,
  ctx: SerializeContext,
): Record<string, unknown> {
  const now = ctx.now ?? Date.now();
  const base = `${ctx.publicUrl}/v1/predictions/${record.id}`;
  const expiresAt = Math.floor(((record.completedAt ?? now) + ctx.retentionMs) / 1000);
  const files = record.dataRemoved
    ? []
    : record.files.map((f) => ({
        name: f.name,
        type: f.type,
        size: f.size,
        url: ctx.fileUrl(f.key, expiresAt),
      }));

  let output: unknown = null;
  if (record.status === 'succeeded' && !record.dataRemoved) {
    if (record.output) {
      const expiring = (key: string) => ctx.fileUrl(key, expiresAt);
      output = withLinks(record.output, expiring);
    } else if (record.outputText !== null) output = record.outputText;
    else {
      const urls = files.map((f) => f.url);
      output = record.singleOutput ? (urls[0] ?? null) : urls;
    }
  }

  const input: Record<string, unknown> = { ...record.input };
  for (const field of record.secretFields) input[field] = REDACTED;

  const end = record.completedAt ?? now;
  const metrics: Record<string, unknown> = {
    predict_time:
      record.predictTime !== null
        ? Math.round(record.predictTime * 1000) / 1000
        : record.startedAt
          ? seconds(end - record.startedAt)
          : 0,
    total_time: seconds(end - record.createdAt),
  };
  const fileCount = record.files.length;
  if (record.modelType === 'image') metrics.image_count = fileCount;
  if (record.modelType === 'image' || record.modelType === 'video') metrics.asset_count = fileCount;
  if (record.modelType === 'video' || record.progress !== null)
    metrics.progress = record.status === 'succeeded' ? 100 : (record.progress ?? 0);

  return {
    id: record.id,
    status: record.status,
    stream: record.stream,
    type: 'inference',
    model: { name: record.model, type: record.modelType },
    input,
    output,
    error: record.status === 'failed' ? (record.error ?? 'Prediction failed') : null,
    logs: record.logs,
    created_at: iso(record.createdAt),
    started_at: record.startedAt === null ? null : iso(record.startedAt),
    completed_at: record.completedAt === null ? null : iso(record.completedAt),
    updated_at: iso(record.updatedAt),
    privacy: record.privacy,
    source: record.source,
    webhook: record.webhook
      ? { url: record.webhook.url, events: record.webhook.events }
      : { url: null, events: [] },
    metrics,
    metadata: {
      billing: { credits_used: record.creditsUsed },
      storage: { files },
      data_available:
        files.length > 0 || record.outputText !== null || (!!record.output && !record.dataRemoved),
    },
    data_removed: record.dataRemoved,
    // The spec shows the delete action as …/{id}/delete, which Gantry serves for DELETE and POST.
    urls: { get: base, cancel: `${base}/cancel`, stream: `${base}/stream`, delete: `${base}/delete` },
  };
}

/** The output value with each stored file's signed link at its place. */
export function withLinks(output: StoredOutput, link: (key: string) => string): unknown {
  let value = structuredClone(output.value);
  for (const { path, key } of output.links) {
    if (path.length === 0) {
      value = link(key);
      continue;
    }
    let parent = value as Record<string | number, unknown>;
    for (const step of path.slice(0, -1)) parent = parent[step] as Record<string | number, unknown>;
    parent[path.at(-1) as string | number] = link(key);
  }
  return value;
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

function seconds(ms: number): number {
  return Math.max(0, Math.round(ms) / 1000);
}
