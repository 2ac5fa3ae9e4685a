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
      ...(record.safety === undefined ? {} : { safety: record.safety }),
    },
    data_removed: record.dataRemoved,
    // The spec shows the delete action as …/{id}/delete, which Gantry serves for DELETE and POST.
    urls: { get: base, cancel: `${base}/cancel`, stream: `${base}/stream`, delete: `${base}/delete` },
  };
}

/**
 * The output value with each stored file's signed link at its place. Only the lists and objects on a
 * link's path are copied (the stored output is shared and read on every GET, poll and list item), and a
 * path follows own properties only: a key such as `__proto__` is the output's data, never a way into a
 * prototype.
 */
export function withLinks(output: StoredOutput, link: (key: string) => string): unknown {
  let root: unknown = output.value;
  const copies = new Set<unknown>();
  const copied = (node: Container): Container => {
    if (copies.has(node)) return node;
    const copy: Container = Array.isArray(node) ? [...node] : { ...node };
    copies.add(copy);
    return copy;
  };
  for (const { path, key } of output.links) {
    const last = path.at(-1);
    if (last === undefined) {
      root = link(key);
      continue;
    }
    if (!isContainer(root)) continue;
    root = copied(root);
    let parent: Container | undefined = root as Container;
    for (const step of path.slice(0, -1)) {
      const child = ownChild(parent, step);
      // A path the stored value does not have (it cannot, as the worker wrote both): no link, no throw.
      if (!isContainer(child)) {
        parent = undefined;
        break;
      }
      const copy = copied(child);
      setOwn(parent, step, copy);
      parent = copy;
    }
    if (parent) setOwn(parent, last, link(key));
  }
  return root;
}

type Container = Record<string, unknown> | unknown[];

function isContainer(value: unknown): value is Container {
  return value !== null && typeof value === 'object';
}

function ownChild(node: Container, step: string | number): unknown {
  return Object.hasOwn(node, step) ? (node as Record<string | number, unknown>)[step] : undefined;
}

function setOwn(node: Container, step: string | number, value: unknown): void {
  Object.defineProperty(node, step, { value, enumerable: true, writable: true, configurable: true });
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

function seconds(ms: number): number {
  return Math.max(0, Math.round(ms) / 1000);
}
