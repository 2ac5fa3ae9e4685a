/**
 * Downloads of the output files a prediction backend names by URL. The URL is the backend's choice, so
 * by default it gets the webhooks' SSRF guard (src/webhooks/ssrf.ts): no loopback, private, link-local
 * or reserved target, checked on the URL and again at connect time (DNS rebinding). A provider with
 * `allow_private_outputs` (a backend on a private network serving its own files) is downloaded without
 * it from its own origin only (`allowPrivate` is passed for those URLs alone), and a redirect away
 * from that origin is guarded again. Redirects (delivery CDNs redirect to signed storage URLs) are followed here, at most
 * MAX_REDIRECTS, each hop checked like the first; the backend's headers go to its own origin only.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, type Dispatcher, request } from 'undici';
import { BackendError } from '../../providers/predictions/types.js';
import { isValidContentType } from '../blobs/types.js';
import {
  checkWebhookUrl,
  createGuardedAgent,
  isForbiddenWebhookTargetError,
  type ResolveHost,
} from '../webhooks/ssrf.js';

const DOWNLOAD_ATTEMPTS = 3;
const DOWNLOAD_RETRY_MS = 250;
const MAX_REDIRECTS = 3;
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** Longest output file Gantry downloads from a backend URL. */
const MAX_DOWNLOAD_BYTES = 512 * 1024 * 1024;

export interface DownloadedFile {
  data: Buffer;
  contentType: string;
  name: string;
}

export interface OutputDownloadsOptions {
  /** Host names exempt from the guard (tests map names to addresses with `resolve`). */
  allowHosts?: readonly string[];
  /** Name resolution, for the URL check and the connections; the system resolver by default. */
  resolve?: ResolveHost;
}

export class OutputDownloads {
  private readonly guarded: Agent;
  private readonly open = new Agent();

  constructor(private readonly options: OutputDownloadsOptions = {}) {
    this.guarded = createGuardedAgent({ allowPrivate: false, ...options });
  }

  /**
   * Fetches output `index` of a prediction, retrying transient failures here: a retry of the whole job
   * would run (and bill) the model again for a file that already exists. A forbidden target is final.
   */
  async download(
    url: string,
    headers: Record<string, string>,
    index: number,
    allowPrivate: boolean,
  ): Promise<DownloadedFile> {
    let lastError = '';
    for (let attempt = 1; attempt <= DOWNLOAD_ATTEMPTS; attempt++) {
      try {
        return await this.downloadOnce(url, headers, index, allowPrivate);
      } catch (error) {
        if (error instanceof BackendError && !error.retryable) throw error;
        if (isForbiddenWebhookTargetError(error)) throw refused(index, error.message);
        lastError = (error as Error).message;
        await sleep(DOWNLOAD_RETRY_MS * attempt);
      }
    }
    throw new BackendError(`Could not download output ${index}: ${lastError}`);
  }

  async close(): Promise<void> {
    await Promise.all([this.guarded.close(), this.open.close()]);
  }

  private async downloadOnce(
    url: string,
    headers: Record<string, string>,
    index: number,
    allowPrivate: boolean,
  ): Promise<DownloadedFile> {
    const response = await this.fetchFollowing(url, headers, index, allowPrivate);
    if (response.statusCode !== 200) {
      await response.body.dump();
      throw new BackendError(`Could not download output ${index}: HTTP ${response.statusCode}`, {
        retryable: response.statusCode >= 500 || response.statusCode === 429,
      });
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of response.body) {
      size += (chunk as Buffer).length;
      if (size > MAX_DOWNLOAD_BYTES) {
        response.body.destroy();
        throw new BackendError(`Output ${index} is larger than ${MAX_DOWNLOAD_BYTES} bytes`);
      }
      chunks.push(chunk as Buffer);
    }
    const contentType = String(response.headers['content-type'] ?? '')
      .split(';')[0]
      ?.trim();
    const path = new URL(url).pathname;
    const name = path.slice(path.lastIndexOf('/') + 1) || `output_${index}`;
    return {
      data: Buffer.concat(chunks),
      contentType: contentType && isValidContentType(contentType) ? contentType : 'application/octet-stream',
      name,
    };
  }

  /**
   * The response of `url` after its redirects, each hop's URL checked, unless `allowPrivate` and the hop
   * is still on `url`'s origin.
   */
  private async fetchFollowing(
    url: string,
    headers: Record<string, string>,
    index: number,
    allowPrivate: boolean,
  ): Promise<Dispatcher.ResponseData> {
    let current = url;
    let sendHeaders = headers;
    const privateOrigin = allowPrivate ? new URL(url).origin : undefined;
    for (let hop = 0; ; hop++) {
      const open = new URL(current).origin === privateOrigin;
      const check = await checkWebhookUrl(current, { ...this.options, allowPrivate: open });
      if (!check.ok) throw refused(index, check.reason);
      const response = await request(check.url, {
        headers: sendHeaders,
        dispatcher: open ? this.open : this.guarded,
        headersTimeout: 30_000,
        bodyTimeout: 60_000,
      });
      const location = response.headers.location;
      if (!REDIRECT_STATUSES.has(response.statusCode) || typeof location !== 'string') return response;
      await response.body.dump();
      if (hop === MAX_REDIRECTS) {
        throw new BackendError(`Could not download output ${index}: more than ${MAX_REDIRECTS} redirects`);
      }
      const next = new URL(location, check.url);
      if (next.origin !== check.url.origin) sendHeaders = {};
      current = next.href;
    }
  }
}

function refused(index: number, reason: string): BackendError {
  return new BackendError(`Could not download output ${index}: refused, ${reason.replace(/^webhook /, '')}`);
}
