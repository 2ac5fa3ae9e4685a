import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { api, errorText } from '../api.js';
import { Dialog, ErrorMessage, Loading, when } from '../components.js';
import { ColumnHeads } from '../table.js';
import type { Ctx } from './ctx.js';
import { NeedAccount } from './need-account.js';

interface Key {
  id: string;
  account_id: string;
  name: string;
  prefix: string;
  created_at: string;
  revoked_at: string | null;
  last_used_at: string | null;
}

export function KeysPage({ ctx }: { ctx: Ctx }) {
  const account = ctx.accountId;
  const [keys, setKeys] = useState<Key[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [creating, setCreating] = useState(false);
  const [revoking, setRevoking] = useState<Key | null>(null);

  const load = useCallback(async () => {
    if (!account) return;
    try {
      const answer = await api<{ data: Key[] }>(
        'GET',
        `/admin/v1/accounts/${encodeURIComponent(account)}/keys`,
      );
      setKeys(answer.data);
      setError(null);
    } catch (err) {
      setError(errorText(err));
    }
  }, [account]);
  useEffect(() => {
    void load();
  }, [load]);

  if (!account) return <NeedAccount title="API keys" />;
  return (
    <section>
      <h1>API keys</h1>
      <p>
        <button type="button" class="primary" onClick={() => setCreating(true)}>
          Create key
        </button>
      </p>
      <ErrorMessage error={error} />
      {keys === null ? (
        <Loading />
      ) : (
        <table class="keys">
          <caption>Keys of this account</caption>
          <ColumnHeads columns={['Name', 'Prefix', 'Created', 'Last use', 'State']} actions />
          <tbody>
            {keys.map((k) => (
              <tr key={k.id} data-key-id={k.id}>
                <td>{k.name}</td>
                <td>
                  <code>{k.prefix}</code>
                </td>
                <td>{when(k.created_at)}</td>
                <td>{k.last_used_at ? when(k.last_used_at) : 'never'}</td>
                <td>{k.revoked_at ? `revoked ${when(k.revoked_at)}` : 'active'}</td>
                <td>
                  {k.revoked_at ? null : (
                    <button type="button" class="danger" onClick={() => setRevoking(k)}>
                      Revoke <span class="sr-only">{k.name}</span>
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {creating ? (
        <CreateKeyDialog
          account={account}
          onCreated={load}
          onClose={() => {
            setCreating(false);
          }}
        />
      ) : null}
      {revoking ? (
        <RevokeDialog
          keyToRevoke={revoking}
          ownKey={ctx.session.key?.id === revoking.id}
          onDone={load}
          onClose={() => setRevoking(null)}
        />
      ) : null}
    </section>
  );
}

/**
 * Create a key: a name, then the key shown once. The secret lives only in this dialog's state and is
 * dropped with it when the dialog closes: it is never in the list or anywhere else in the page.
 */
function CreateKeyDialog(props: { account: string; onCreated: () => void; onClose: () => void }) {
  const [name, setName] = useState('');
  const [secret, setSecret] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [copied, setCopied] = useState(false);
  const secretField = useRef<HTMLInputElement>(null);

  const create = async (event: Event) => {
    event.preventDefault();
    setError(null);
    try {
      const answer = await api<{ key: string }>(
        'POST',
        `/admin/v1/accounts/${encodeURIComponent(props.account)}/keys`,
        { name: name.trim() },
      );
      setSecret(answer.key);
      props.onCreated();
    } catch (err) {
      setError(errorText(err));
    }
  };
  useEffect(() => {
    if (secret) secretField.current?.select();
  }, [secret]);

  const copy = async () => {
    if (!secret) return;
    try {
      await navigator.clipboard.writeText(secret);
      setCopied(true);
    } catch {
      // Without clipboard permission the field stays selected for a manual copy.
      secretField.current?.select();
      setError('Could not copy: select the key and copy it yourself.');
    }
  };

  if (secret) {
    return (
      <Dialog title="Your new key" onClose={props.onClose}>
        <p class="warning" role="note">
          Copy this key now: it is shown only once. Gantry keeps only its hash.
        </p>
        <label for="new-key">Key</label>
        <input id="new-key" class="secret" ref={secretField} readOnly value={secret} spellcheck={false} />
        <ErrorMessage error={error} />
        <p class="actions">
          <button type="button" onClick={copy}>
            {copied ? 'Copied' : 'Copy'}
          </button>
          <button type="button" class="primary" onClick={props.onClose}>
            Done
          </button>
        </p>
        <p aria-live="polite" class="sr-only">
          {copied ? 'Key copied to the clipboard' : ''}
        </p>
      </Dialog>
    );
  }
  return (
    <Dialog title="Create a key" onClose={props.onClose}>
      <form onSubmit={create}>
        <label for="key-name">Name</label>
        <input
          id="key-name"
          value={name}
          required
          maxLength={64}
          onInput={(e) => setName((e.target as HTMLInputElement).value)}
        />
        <ErrorMessage error={error} />
        <p class="actions">
          <button type="button" onClick={props.onClose}>
            Cancel
          </button>
          <button type="submit" class="primary">
            Create
          </button>
        </p>
      </form>
    </Dialog>
  );
}

function RevokeDialog(props: { keyToRevoke: Key; ownKey: boolean; onDone: () => void; onClose: () => void }) {
  const [error, setError] = useState<string | null>(null);
  const revoke = async () => {
    try {
      await api('DELETE', `/admin/v1/keys/${encodeURIComponent(props.keyToRevoke.id)}`);
      props.onClose();
      props.onDone();
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <Dialog title={`Revoke “${props.keyToRevoke.name}”?`} onClose={props.onClose}>
      <p>
        Calls with this key are refused at once, on every instance. This cannot be undone.
        {props.ownKey ? ' You signed in with this key: revoking it signs you out.' : ''}
      </p>
      <ErrorMessage error={error} />
      <p class="actions">
        <button type="button" onClick={props.onClose}>
          Cancel
        </button>
        <button type="button" class="danger" onClick={revoke}>
          Revoke key
        </button>
      </p>
    </Dialog>
  );
}
