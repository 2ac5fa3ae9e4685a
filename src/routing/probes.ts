import type { ProbeSettings } from '../config/types.js';
import { isTrial } from './breaker.js';
import type { Deployment } from './health.js';
import type { ModelRouting } from './router.js';

/** Where one provider is and how to reach its model list. */
export interface ProbeTarget {
  /** The URL a probe GETs: the OpenAI-compatible `GET {base_url}/models`, Anthropic's `GET /v1/models`. */
  url: string;
  headers: Record<string, string>;
}

/**
 * Active probes (off by default): every `intervalMs`, each deployment that carried no call for `idleMs`
 * gets one cheap `GET …/models` (no tokens spent), which goes through its circuit breaker like a call:
 * an answer below 500 other than 429 is a success, anything else (no connection, timeout, 5xx, 429) a
 * failure. So an idle deployment that died is found before a client's call, and an open one is tried
 * (half-open) without waiting for traffic. A probe's success closes only a circuit that probes opened:
 * one opened by real calls stays half-open, its trial left for the next real call. stop() aborts the
 * probes in flight (no verdict).
 */
export class Probes {
  private readonly timer: NodeJS.Timeout;
  private running = false;
  private readonly stopped = new AbortController();

  constructor(
    private readonly settings: ProbeSettings,
    private readonly targets: ReadonlyMap<string, ProbeTarget>,
    private readonly models: readonly ModelRouting[],
  ) {
    this.timer = setInterval(() => void this.round(), settings.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.stopped.abort();
  }

  private async round(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const now = Date.now();
      const due: Array<Promise<void>> = [];
      for (const model of this.models) {
        for (const d of model.deployments) {
          const target = this.targets.get(d.provider);
          if (target && d.inflight === 0 && now - d.lastUsedAt >= this.settings.idleMs) {
            due.push(this.probe(d, target));
          }
        }
      }
      await Promise.all(due);
    } finally {
      this.running = false;
    }
  }

  private async probe(d: Deployment, target: ProbeTarget): Promise<void> {
    if (this.stopped.signal.aborted) return;
    const permit = d.begin(Date.now());
    if (permit === 0) return;
    let ok = false;
    try {
      const res = await fetch(target.url, {
        headers: target.headers,
        signal: AbortSignal.any([this.stopped.signal, AbortSignal.timeout(this.settings.timeoutMs)]),
      });
      await res.body?.cancel();
      ok = res.status < 500 && res.status !== 429;
    } catch {
      ok = false;
    }
    const now = Date.now();
    if (this.stopped.signal.aborted) d.abandoned(permit);
    else if (!ok) d.failed(permit, now, true);
    // A trial on a circuit real calls opened: given back, for a real call to take.
    else if (isTrial(permit) && !d.openedByProbe) d.abandoned(permit);
    else d.succeeded(permit, now, undefined);
    d.end();
  }
}
