import type { FileHandle } from 'node:fs/promises';
import { mkdir, open } from 'node:fs/promises';
import { dirname } from 'node:path';
import { assertUsageBatch, type UsageRecord } from './record.js';
import type { UsageSink } from './sink.js';

export interface JsonlUsageSinkOptions {
  /** How many recent ids are remembered to skip a retried batch; default 100,000. */
  rememberIds?: number;
}

/**
 * Appends one JSON line per record, one write per batch, for people and tools that want a plain file.
 * A retried batch is skipped by the ids remembered in memory; across restarts the file can hold a line
 * twice only if the process died between writing and reporting success, so readers dedupe by `id`.
 */
export class JsonlUsageSink implements UsageSink {
  readonly name = 'jsonl';
  private handle: Promise<FileHandle> | undefined;
  private readonly seen = new Set<string>();
  private readonly remember: number;

  constructor(
    readonly path: string,
    options: JsonlUsageSinkOptions = {},
  ) {
    this.remember = options.rememberIds ?? 100_000;
  }

  async write(records: UsageRecord[]): Promise<void> {
    assertUsageBatch(records);
    const fresh: UsageRecord[] = [];
    const batchIds = new Set<string>();
    for (const r of records) {
      if (this.seen.has(r.id) || batchIds.has(r.id)) continue;
      batchIds.add(r.id);
      fresh.push(r);
    }
    if (fresh.length === 0) return;
    const text = fresh.map((r) => `${JSON.stringify(r)}\n`).join('');
    const handle = await this.file();
    await handle.appendFile(text, 'utf8');
    for (const id of batchIds) this.seen.add(id);
    this.forgetOldest();
  }

  async close(): Promise<void> {
    const handle = this.handle;
    this.handle = undefined;
    if (handle) await (await handle).close();
  }

  private file(): Promise<FileHandle> {
    if (!this.handle) {
      const opening = mkdir(dirname(this.path), { recursive: true }).then(() => open(this.path, 'a'));
      // A failed open is retried on the next write rather than remembered.
      opening.catch(() => {
        if (this.handle === opening) this.handle = undefined;
      });
      this.handle = opening;
    }
    return this.handle;
  }

  private forgetOldest(): void {
    // A Set iterates in insertion order, so the first ids are the oldest.
    let excess = this.seen.size - this.remember;
    for (const id of this.seen) {
      if (excess-- <= 0) break;
      this.seen.delete(id);
    }
  }
}
