import { useRef, useState } from 'preact/hooks';
import { api, errorText, type Session } from '../api.js';
import { ErrorMessage } from '../components.js';

/**
 * Sign-in: the key is read from the field at submit, sent once to POST /admin/v1/session and the field is
 * emptied; nothing keeps it (no state, no storage). The answer's session cookie is HttpOnly.
 */
export function SignInPage({ onSignedIn }: { onSignedIn: (s: Session) => void }) {
  const field = useRef<HTMLInputElement>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (event: Event) => {
    event.preventDefault();
    const input = field.current;
    if (!input) return;
    const key = input.value.trim();
    input.value = '';
    if (!key) {
      setError('Enter an API key or an admin key.');
      return;
    }
    setBusy(true);
    setError(null);
    try {
      onSignedIn(await api<Session>('POST', '/admin/v1/session', { key }));
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
      input.focus();
    }
  };

  return (
    <main id="main" class="signin">
      <h1>Sign in to the Gantry console</h1>
      <form onSubmit={submit}>
        <label for="key">API key or admin key</label>
        <input
          id="key"
          ref={field}
          type="password"
          autoComplete="off"
          spellcheck={false}
          required
          aria-describedby="key-help"
        />
        <p id="key-help" class="help">
          The key is sent once to sign you in and is not kept by the page; the session lasts a few hours.
        </p>
        <ErrorMessage error={error} />
        <button type="submit" disabled={busy}>
          Sign in
        </button>
      </form>
    </main>
  );
}
