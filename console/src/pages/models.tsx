import { useCallback, useEffect, useState } from 'preact/hooks';
import { api, errorText } from '../api.js';
import { ErrorMessage, Loading } from '../components.js';
import { Link, navigate } from '../router.js';
import { type InputSchema, SchemaForm } from '../schema-form.js';
import type { Ctx } from './ctx.js';

interface Model {
  id: string;
  name: string;
  type: string;
  status: string;
  status_reason?: string | null;
  pricing?: { amount: number; currency: string; unit: string } | null;
  override?: { status: string; reason: string; set_by: string; at: string } | null;
}

function price(m: Model): string {
  if (!m.pricing) return '—';
  return `${m.pricing.amount} ${m.pricing.currency} per ${m.pricing.unit.replace(/_/g, ' ')}`;
}

export function ModelsPage({ ctx }: { ctx: Ctx }) {
  const operator = ctx.session.role === 'operator';
  const [models, setModels] = useState<Model[] | null>(null);
  const [error, setError] = useState<string | null>(null);

  // Owners read the catalogue their key sees; operators the admin view, with status overrides.
  const load = useCallback(async () => {
    try {
      const answer = await api<{ data: Model[] }>('GET', operator ? '/admin/v1/models' : '/v1/models');
      setModels(answer.data);
      setError(null);
    } catch (err) {
      setError(errorText(err));
    }
  }, [operator]);
  useEffect(() => {
    void load();
  }, [load]);

  return (
    <section>
      <h1>Models</h1>
      <ErrorMessage error={error} />
      {models === null ? (
        error ? null : (
          <Loading />
        )
      ) : (
        <table class="models">
          <caption>Catalogue</caption>
          <thead>
            <tr>
              <th scope="col">Model</th>
              <th scope="col">Type</th>
              <th scope="col">Status</th>
              <th scope="col">Pricing</th>
              {operator ? <th scope="col">Override</th> : null}
            </tr>
          </thead>
          <tbody>
            {models.map((m) => (
              <tr key={m.id} data-model={m.id}>
                <th scope="row">
                  {operator ? m.id : <Link to={`/models/${m.id}`}>{m.id}</Link>}
                  <div class="sub">{m.name}</div>
                </th>
                <td>{m.type}</td>
                <td>
                  <span class={`status ${m.status}`}>{m.status}</span>
                  {m.status_reason ? <div class="sub">{m.status_reason}</div> : null}
                </td>
                <td>{price(m)}</td>
                {operator ? (
                  <td>
                    <Override model={m} onChanged={load} />
                  </td>
                ) : null}
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

/** The operator's status override of one model: set (status + reason) or clear. */
function Override({ model, onChanged }: { model: Model; onChanged: () => void }) {
  const [error, setError] = useState<string | null>(null);
  const path = `/admin/v1/models/${model.id}/status`;
  const set = async (event: Event) => {
    event.preventDefault();
    const form = new FormData(event.target as HTMLFormElement);
    try {
      await api('PUT', path, { status: form.get('status'), reason: String(form.get('reason') ?? '') });
      onChanged();
    } catch (err) {
      setError(errorText(err));
    }
  };
  const clear = async () => {
    try {
      await api('DELETE', path);
      onChanged();
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <form class="override" onSubmit={set} aria-label={`Status override of ${model.id}`}>
      {model.override ? (
        <p>
          {model.override.status} by {model.override.set_by}: {model.override.reason}{' '}
          <button type="button" onClick={clear}>
            Clear
          </button>
        </p>
      ) : null}
      <select name="status" aria-label="New status" defaultValue="degraded">
        <option>operational</option>
        <option>degraded</option>
        <option>offline</option>
      </select>
      <input name="reason" aria-label="Reason" placeholder="reason" required />
      <button type="submit">Set</button>
      <ErrorMessage error={error} />
    </form>
  );
}

interface ModelDetail extends Model {
  input_schema?: InputSchema | null;
}

export function ModelPage({ ctx, id }: { ctx: Ctx; id: string }) {
  const [model, setModel] = useState<ModelDetail | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    api<ModelDetail>('GET', `/v1/models/${id}?fields=input_schema,output_schema`).then(setModel, (err) =>
      setError(errorText(err)),
    );
  }, [id]);

  if (ctx.session.role === 'operator') {
    return (
      <section>
        <h1>{id}</h1>
        <p>Predictions are made by accounts: sign in with one of the account's keys to use the form.</p>
      </section>
    );
  }

  // The prediction is made with the session (so its source is "web"), then followed on its own page.
  const create = async (input: Record<string, unknown>) => {
    setBusy(true);
    setError(null);
    try {
      const prediction = await api<{ id: string }>('POST', '/v1/predictions', { model: id, input });
      navigate(`/predictions/${prediction.id}`);
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
    }
  };

  return (
    <section>
      <h1>{model?.name ?? id}</h1>
      <ErrorMessage error={error} />
      {model === null ? (
        error ? null : (
          <Loading />
        )
      ) : (
        <>
          <p>
            <code>{model.id}</code> · {model.type} ·{' '}
            <span class={`status ${model.status}`}>{model.status}</span> · {price(model)}
          </p>
          {model.input_schema?.properties ? (
            <>
              <h2>Create a prediction</h2>
              <SchemaForm schema={model.input_schema} submitLabel="Run" busy={busy} onSubmit={create} />
            </>
          ) : model.type === 'text' ? (
            <p>
              A chat model: try it in the <Link to="/playground">Playground</Link>.
            </p>
          ) : (
            <p>This model takes no prediction input.</p>
          )}
        </>
      )}
    </section>
  );
}
