import { useCallback, useEffect, useState } from 'preact/hooks';
import { ApiError, api, errorText, query } from '../api.js';
import { ErrorMessage, Json, Loading, when } from '../components.js';
import { Link, navigate } from '../router.js';
import { ColumnHeads } from '../table.js';
import type { Ctx } from './ctx.js';
import { NeedAccount } from './need-account.js';

interface Prediction {
  id: string;
  status: string;
  model: { name: string; type: string } | string;
  source: string;
  input: unknown;
  output: unknown;
  error: string | null;
  logs: string | null;
  created_at: string;
  started_at: string | null;
  completed_at: string | null;
  metadata?: { storage?: { files?: Array<{ name: string; type: string; url: string }> } };
}

interface Delivery {
  id: string;
  event: string;
  url: string;
  state: string;
  attempts: number;
  created_at: string;
  log: Array<{ at: string; outcome: string; status: number | null; error: string | null; ms: number | null }>;
}

const STATUSES = ['starting', 'processing', 'succeeded', 'failed', 'canceled'];
const SOURCES = ['api', 'web'];
const TERMINAL = new Set(['succeeded', 'failed', 'canceled']);
const PAGE = 20;

const modelName = (p: Prediction) => (typeof p.model === 'string' ? p.model : p.model.name);

export function PredictionsPage({ ctx, search }: { ctx: Ctx; search: URLSearchParams }) {
  const account = ctx.accountId;
  const model = search.get('model') ?? '';
  const status = search.get('status') ?? '';
  const source = search.get('source') ?? '';
  const cursor = search.get('cursor') ?? '';
  const [list, setList] = useState<{ data: Prediction[]; next: string | null } | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!account) return;
    setList(null);
    api<{ data: Prediction[]; next: string | null }>(
      'GET',
      `/admin/v1/predictions${query({ account, model, status, source, cursor, limit: PAGE })}`,
    ).then(
      (answer) => {
        setList(answer);
        setError(null);
      },
      (err) => setError(errorText(err)),
    );
  }, [account, model, status, source, cursor]);

  if (!account) return <NeedAccount title="Predictions" />;

  // Filters live in the URL: a filtered list can be bookmarked, and Back returns to the previous page.
  const filter = (event: Event) => {
    event.preventDefault();
    const form = new FormData(event.target as HTMLFormElement);
    const next = query({
      model: String(form.get('model') ?? '').trim(),
      status: String(form.get('status') ?? ''),
      source: String(form.get('source') ?? ''),
    });
    navigate(`/predictions${next}`);
  };

  return (
    <section>
      <h1>Predictions</h1>
      <form class="filters" onSubmit={filter}>
        <label>
          Model <input name="model" defaultValue={model} placeholder="owner/name" />
        </label>
        <label>
          Status{' '}
          <select name="status" defaultValue={status}>
            <option value="">any</option>
            {STATUSES.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
        <label>
          Source{' '}
          <select name="source" defaultValue={source}>
            <option value="">any</option>
            {SOURCES.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
        <button type="submit">Filter</button>
      </form>
      <ErrorMessage error={error} />
      {list === null ? (
        error ? null : (
          <Loading />
        )
      ) : list.data.length === 0 ? (
        <p>No predictions match.</p>
      ) : (
        <table class="predictions">
          <caption>Predictions, newest first</caption>
          <ColumnHeads columns={['Prediction', 'Model', 'Status', 'Source', 'Created']} />
          <tbody>
            {list.data.map((p) => (
              <tr key={p.id}>
                <td>
                  <Link to={`/predictions/${p.id}`}>
                    <code>{p.id.slice(0, 8)}</code>
                  </Link>
                </td>
                <td>{modelName(p)}</td>
                <td>
                  <span class={`status ${p.status}`}>{p.status}</span>
                </td>
                <td>{p.source}</td>
                <td>{when(p.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <nav class="paging" aria-label="Pages">
        {cursor ? (
          <button type="button" onClick={() => history.back()}>
            Previous page
          </button>
        ) : null}
        {list?.next ? (
          <Link to={`/predictions${query({ model, status, source, cursor: list.next })}`}>Next page</Link>
        ) : null}
      </nav>
    </section>
  );
}

/** The kind of player an output needs, from the stored file's type, else the URL's extension. */
function kindOf(url: string, p: Prediction): 'image' | 'audio' | 'video' | 'link' {
  const file = p.metadata?.storage?.files?.find((f) => f.url === url);
  const type = file?.type ?? '';
  const path = url.split('?')[0] ?? '';
  if (type.startsWith('image/') || /\.(png|jpe?g|webp|gif|avif)$/i.test(path)) return 'image';
  if (type.startsWith('audio/') || /\.(mp3|wav|ogg|flac|m4a)$/i.test(path)) return 'audio';
  if (type.startsWith('video/') || /\.(mp4|webm|mov)$/i.test(path)) return 'video';
  return 'link';
}

function isUrl(value: unknown): value is string {
  return typeof value === 'string' && /^(https?:\/\/|\/)/.test(value);
}

function Output({ p }: { p: Prediction }) {
  const output = p.output;
  if (output === null || output === undefined) return <p>No output{TERMINAL.has(p.status) ? '' : ' yet'}.</p>;
  const items = Array.isArray(output) ? output : [output];
  if (!items.every(isUrl)) {
    return typeof output === 'string' ? <pre class="text-output">{output}</pre> : <Json value={output} />;
  }
  return (
    <ul class="outputs">
      {items.map((url, i) => {
        const kind = kindOf(url, p);
        const label = `Output ${i + 1} of ${modelName(p)}`;
        return (
          <li key={url}>
            {kind === 'image' ? <img src={url} alt={label} /> : null}
            {kind === 'audio' ? (
              // biome-ignore lint/a11y/useMediaCaption: generated audio has no captions to offer.
              <audio controls src={url} aria-label={label} />
            ) : null}
            {kind === 'video' ? (
              // biome-ignore lint/a11y/useMediaCaption: generated video has no captions to offer.
              <video controls src={url} aria-label={label} />
            ) : null}
            <a href={url} target="_blank" rel="noopener noreferrer">
              Open {kind === 'link' ? 'output' : kind} {i + 1}
            </a>
          </li>
        );
      })}
    </ul>
  );
}

export function PredictionPage({ ctx, id }: { ctx: Ctx; id: string }) {
  const [p, setP] = useState<Prediction | null>(null);
  const [missing, setMissing] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [deliveries, setDeliveries] = useState<Delivery[] | null>(null);
  const [note, setNote] = useState<string | null>(null);

  const loadDeliveries = useCallback(async () => {
    try {
      const answer = await api<{ data: Delivery[] }>(
        'GET',
        `/admin/v1/predictions/${encodeURIComponent(id)}/deliveries`,
      );
      setDeliveries(answer.data);
    } catch {
      setDeliveries(null);
    }
  }, [id]);

  // Follows a running prediction until it ends, then loads its webhook deliveries.
  useEffect(() => {
    let stop = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      try {
        const answer = await api<Prediction>('GET', `/admin/v1/predictions/${encodeURIComponent(id)}`);
        if (stop) return;
        setP(answer);
        setError(null);
        if (TERMINAL.has(answer.status)) void loadDeliveries();
        else timer = setTimeout(load, 1000);
      } catch (err) {
        if (stop) return;
        if (err instanceof ApiError && err.status === 404) setMissing(true);
        else setError(errorText(err));
      }
    };
    void load();
    return () => {
      stop = true;
      clearTimeout(timer);
    };
  }, [id, loadDeliveries]);

  // A delivery on its way is followed until it ends, so its outcome shows without a reload.
  const settling = deliveries?.some((d) => d.state === 'pending' || d.state === 'sending') ?? false;
  useEffect(() => {
    if (!settling) return;
    const timer = setTimeout(() => void loadDeliveries(), 1000);
    return () => clearTimeout(timer);
  }, [settling, deliveries, loadDeliveries]);

  const redeliver = async (delivery: Delivery) => {
    try {
      await api(
        'POST',
        `/admin/v1/predictions/${encodeURIComponent(id)}/deliveries/${encodeURIComponent(delivery.id)}/redeliver`,
      );
      setNote(`Delivery of ${delivery.event} queued again.`);
      await loadDeliveries();
    } catch (err) {
      setNote(errorText(err));
    }
  };

  if (!ctx.accountId && ctx.session.role === 'operator') return <NeedAccount title="Prediction" />;
  if (missing) {
    return (
      <section>
        <h1>Prediction not found</h1>
        <p>
          There is no prediction <code>{id}</code> in this account.{' '}
          <Link to="/predictions">All predictions</Link>
        </p>
      </section>
    );
  }
  if (!p) return error ? <ErrorMessage error={error} /> : <Loading />;
  return (
    <section>
      <h1>
        Prediction <code>{p.id}</code>
      </h1>
      <ErrorMessage error={error} />
      <dl class="facts">
        <dt>Status</dt>
        <dd>
          <span class={`status ${p.status}`} aria-live="polite">
            {p.status}
          </span>
        </dd>
        <dt>Model</dt>
        <dd>{modelName(p)}</dd>
        <dt>Source</dt>
        <dd>{p.source}</dd>
        <dt>Created</dt>
        <dd>{when(p.created_at)}</dd>
        <dt>Completed</dt>
        <dd>{when(p.completed_at)}</dd>
      </dl>
      {p.error ? <ErrorMessage error={p.error} /> : null}
      <h2>Output</h2>
      <Output p={p} />
      <h2>Input</h2>
      <Json value={p.input} />
      <h2>Logs</h2>
      <pre class="logs">{p.logs || 'No logs.'}</pre>
      <h2>Webhook deliveries</h2>
      {note ? <p aria-live="polite">{note}</p> : null}
      {deliveries === null || deliveries.length === 0 ? (
        <p>No webhook deliveries.</p>
      ) : (
        <table class="deliveries">
          <ColumnHeads columns={['Event', 'URL', 'State', 'Attempts']} actions />
          <tbody>
            {deliveries.map((d) => (
              <tr key={d.id} data-delivery-id={d.id}>
                <td>{d.event}</td>
                <td>
                  <code>{d.url}</code>
                </td>
                <td>{d.state}</td>
                <td>
                  <details>
                    <summary>{d.attempts}</summary>
                    <ol>
                      {d.log.map((a) => (
                        <li key={a.at}>
                          {when(a.at)}: {a.outcome}
                          {a.status ? ` (HTTP ${a.status})` : ''}
                          {a.error ? ` — ${a.error}` : ''}
                          {a.ms !== null ? `, ${a.ms} ms` : ''}
                        </li>
                      ))}
                    </ol>
                  </details>
                </td>
                <td>
                  <button type="button" onClick={() => redeliver(d)}>
                    Redeliver <span class="sr-only">{d.event}</span>
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
