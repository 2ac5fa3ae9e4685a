import { useCallback, useEffect, useState } from 'preact/hooks';
import { api, errorText } from '../api.js';
import { ErrorMessage, Loading, when } from '../components.js';
import type { Ctx } from './ctx.js';

interface Incident {
  id: string;
  title: string;
  components: string[];
  impact: string;
  status: string;
  source: string;
  opened_at: string;
  resolved_at: string | null;
  updates: Array<{ at: string; status: string; message: string }>;
}

const IMPACTS = ['degraded', 'offline', 'maintenance'];
const STATUSES = ['investigating', 'identified', 'monitoring'];

/** Incidents shown on the status page: everyone reads them, operators open, update and resolve them. */
export function IncidentsPage({ ctx }: { ctx: Ctx }) {
  const operator = ctx.session.role === 'operator';
  const [incidents, setIncidents] = useState<Incident[] | null>(null);
  const [components, setComponents] = useState<string[]>(['api', 'console']);
  const [error, setError] = useState<string | null>(null);

  const load = useCallback(async () => {
    try {
      setIncidents((await api<{ data: Incident[] }>('GET', '/admin/v1/incidents?limit=50')).data);
      setError(null);
    } catch (err) {
      setError(errorText(err));
    }
  }, []);
  useEffect(() => {
    void load();
    if (!operator) return;
    api<{ data: Array<{ id: string; visibility?: string }> }>('GET', '/admin/v1/models').then(
      (answer) =>
        setComponents([
          'api',
          'console',
          ...answer.data.filter((m) => m.visibility !== 'private').map((m) => m.id),
        ]),
      () => undefined,
    );
  }, [load, operator]);

  const open = async (event: Event) => {
    event.preventDefault();
    const form = event.target as HTMLFormElement;
    const data = new FormData(form);
    try {
      await api('POST', '/admin/v1/incidents', {
        title: String(data.get('title') ?? '').trim(),
        components: data.getAll('components').map(String),
        impact: String(data.get('impact')),
        status: String(data.get('status')),
        message: String(data.get('message') ?? '').trim(),
      });
      form.reset();
      await load();
    } catch (err) {
      setError(errorText(err));
    }
  };

  return (
    <section>
      <h1>Incidents</h1>
      <ErrorMessage error={error} />
      {operator ? (
        <details class="panel">
          <summary>Open an incident</summary>
          <form class="schema-form" onSubmit={open}>
            <div class="field">
              <label for="incident-title">Title</label>
              <input id="incident-title" name="title" required maxLength={200} />
            </div>
            <fieldset>
              <legend>Components</legend>
              {components.map((c) => (
                <label key={c} class="inline">
                  <input type="checkbox" name="components" value={c} /> {c}
                </label>
              ))}
            </fieldset>
            <div class="field">
              <label for="incident-impact">Impact</label>
              <select id="incident-impact" name="impact">
                {IMPACTS.map((i) => (
                  <option key={i}>{i}</option>
                ))}
              </select>
            </div>
            <div class="field">
              <label for="incident-status">Status</label>
              <select id="incident-status" name="status">
                {STATUSES.map((s) => (
                  <option key={s}>{s}</option>
                ))}
              </select>
            </div>
            <div class="field">
              <label for="incident-message">Message</label>
              <textarea id="incident-message" name="message" rows={3} required />
            </div>
            <button type="submit" class="primary">
              Open incident
            </button>
          </form>
        </details>
      ) : null}
      {incidents === null ? (
        error ? null : (
          <Loading />
        )
      ) : incidents.length === 0 ? (
        <p>No incidents.</p>
      ) : (
        <ul class="incidents">
          {incidents.map((i) => (
            <li key={i.id}>
              <IncidentItem incident={i} operator={operator} onChanged={load} />
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

function IncidentItem(props: { incident: Incident; operator: boolean; onChanged: () => void }) {
  const i = props.incident;
  const [error, setError] = useState<string | null>(null);
  const base = `/admin/v1/incidents/${encodeURIComponent(i.id)}`;
  const update = async (event: Event) => {
    event.preventDefault();
    const form = event.target as HTMLFormElement;
    const data = new FormData(form);
    try {
      await api('PATCH', base, {
        status: String(data.get('status')),
        message: String(data.get('message') ?? ''),
      });
      form.reset();
      props.onChanged();
    } catch (err) {
      setError(errorText(err));
    }
  };
  const resolve = async () => {
    try {
      await api('POST', `${base}/resolve`, {});
      props.onChanged();
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <article aria-labelledby={`incident-${i.id}`}>
      <h2 id={`incident-${i.id}`}>{i.title}</h2>
      <p>
        <span class={`status ${i.resolved_at ? 'operational' : i.impact}`}>
          {i.resolved_at ? 'resolved' : `${i.status} · ${i.impact}`}
        </span>{' '}
        · {i.components.join(', ')} · opened {when(i.opened_at)}
        {i.resolved_at ? ` · resolved ${when(i.resolved_at)}` : ''} · {i.source}
      </p>
      <ol class="updates">
        {i.updates.map((u) => (
          <li key={u.at}>
            {when(u.at)} — <strong>{u.status}</strong>: {u.message}
          </li>
        ))}
      </ol>
      {props.operator && !i.resolved_at ? (
        <form class="filters" onSubmit={update} aria-label={`Update ${i.title}`}>
          <label>
            Status{' '}
            <select name="status" defaultValue={i.status}>
              {STATUSES.map((s) => (
                <option key={s}>{s}</option>
              ))}
            </select>
          </label>
          <label>
            Message <input name="message" required />
          </label>
          <button type="submit">Post update</button>
          <button type="button" onClick={resolve}>
            Resolve
          </button>
        </form>
      ) : null}
      <ErrorMessage error={error} />
    </article>
  );
}
