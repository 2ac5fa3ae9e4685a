import { useCallback, useEffect, useState } from 'preact/hooks';
import { api, errorText } from '../api.js';
import { Dialog, ErrorMessage, Loading, money, when } from '../components.js';
import { navigate } from '../router.js';
import { ColumnHeads } from '../table.js';
import type { Ctx } from './ctx.js';

interface Account {
  id: string;
  name: string;
  tier: string;
  status: 'active' | 'suspended';
  created_at: string;
}

/** The operator's accounts: pick one to work on, create, suspend or reactivate, grant credits. */
export function AccountsPage({ ctx }: { ctx: Ctx }) {
  const [accounts, setAccounts] = useState<Account[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [granting, setGranting] = useState<Account | null>(null);

  const load = useCallback(async () => {
    try {
      setAccounts((await api<{ data: Account[] }>('GET', '/admin/v1/accounts')).data);
      setError(null);
    } catch (err) {
      setError(errorText(err));
    }
  }, []);
  useEffect(() => {
    void load();
  }, [load]);

  const create = async (event: Event) => {
    event.preventDefault();
    const form = event.target as HTMLFormElement;
    const data = new FormData(form);
    const tier = String(data.get('tier') ?? '').trim();
    try {
      await api('POST', '/admin/v1/accounts', {
        name: String(data.get('name') ?? '').trim(),
        ...(tier ? { tier } : {}),
      });
      form.reset();
      await load();
    } catch (err) {
      setError(errorText(err));
    }
  };

  const setStatus = async (account: Account, status: Account['status']) => {
    try {
      await api('PATCH', `/admin/v1/accounts/${encodeURIComponent(account.id)}`, { status });
      await load();
    } catch (err) {
      setError(errorText(err));
    }
  };

  if (ctx.session.role !== 'operator') return null;
  return (
    <section>
      <h1>Accounts</h1>
      <form class="filters" onSubmit={create}>
        <label>
          Name <input name="name" required maxLength={64} />
        </label>
        <label>
          Tier <input name="tier" placeholder="default" />
        </label>
        <button type="submit">Create account</button>
      </form>
      <ErrorMessage error={error} />
      {accounts === null ? (
        error ? null : (
          <Loading />
        )
      ) : (
        <table class="accounts">
          <caption>Accounts</caption>
          <ColumnHeads columns={['Name', 'Tier', 'Status', 'Created']} actions />
          <tbody>
            {accounts.map((a) => (
              <tr key={a.id} aria-current={ctx.accountId === a.id ? 'true' : undefined}>
                <th scope="row">{a.name}</th>
                <td>{a.tier}</td>
                <td>{a.status}</td>
                <td>{when(a.created_at)}</td>
                <td>
                  <div class="actions">
                    <button
                      type="button"
                      onClick={() => {
                        ctx.pickAccount({ id: a.id, name: a.name });
                        navigate('/keys');
                      }}
                    >
                      Open <span class="sr-only">{a.name}</span>
                    </button>
                    <button type="button" onClick={() => setGranting(a)}>
                      Grant credits <span class="sr-only">to {a.name}</span>
                    </button>
                    {a.status === 'active' ? (
                      <button type="button" class="danger" onClick={() => setStatus(a, 'suspended')}>
                        Suspend <span class="sr-only">{a.name}</span>
                      </button>
                    ) : (
                      <button type="button" onClick={() => setStatus(a, 'active')}>
                        Reactivate <span class="sr-only">{a.name}</span>
                      </button>
                    )}
                  </div>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {granting ? <GrantDialog account={granting} onClose={() => setGranting(null)} /> : null}
    </section>
  );
}

function GrantDialog({ account, onClose }: { account: Account; onClose: () => void }) {
  const [error, setError] = useState<string | null>(null);
  const [balance, setBalance] = useState<number | null | undefined>(undefined);
  const path = `/admin/v1/accounts/${encodeURIComponent(account.id)}/credits`;
  useEffect(() => {
    api<{ balance: number | null }>('GET', path).then(
      (answer) => setBalance(answer.balance),
      (err) => setError(errorText(err)),
    );
  }, [path]);
  const grant = async (event: Event) => {
    event.preventDefault();
    const data = new FormData(event.target as HTMLFormElement);
    const note = String(data.get('note') ?? '').trim();
    try {
      const answer = await api<{ balance: number | null }>('POST', path, {
        amount: Number(data.get('amount')),
        ...(note ? { note } : {}),
      });
      setBalance(answer.balance);
      (event.target as HTMLFormElement).reset();
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <Dialog title={`Credits of ${account.name}`} onClose={onClose}>
      <p aria-live="polite">
        Balance: {balance === undefined ? '…' : balance === null ? 'unlimited' : money(balance)}
      </p>
      <form onSubmit={grant}>
        <label for="amount">Amount (negative to take back)</label>
        <input id="amount" name="amount" type="number" step="any" required />
        <label for="note">Note</label>
        <input id="note" name="note" maxLength={200} />
        <ErrorMessage error={error} />
        <p class="actions">
          <button type="button" onClick={onClose}>
            Close
          </button>
          <button type="submit" class="primary">
            Grant
          </button>
        </p>
      </form>
    </Dialog>
  );
}
