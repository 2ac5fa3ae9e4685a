/**
 * The Gantry console: a Preact app served by Gantry itself under /console. It signs in once with a key
 * (owner) or an admin key (operator), then works on the session cookie and its CSRF token.
 */
import './style.css';
import { render } from 'preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { api, type Session, setCsrf, whenSignedOut } from './api.js';
import { Loading } from './components.js';
import { AccountsPage } from './pages/accounts.js';
import type { Ctx } from './pages/ctx.js';
import { IncidentsPage } from './pages/incidents.js';
import { KeysPage } from './pages/keys.js';
import { ModelPage, ModelsPage } from './pages/models.js';
import { PlaygroundPage } from './pages/playground.js';
import { PredictionPage, PredictionsPage } from './pages/predictions.js';
import { SignInPage } from './pages/signin.js';
import { UsagePage } from './pages/usage.js';
import { Link, navigate, useLocation } from './router.js';

const ACCOUNT_KEY = 'gantry-console-account';

interface Picked {
  id: string;
  name: string;
}

function readPicked(): Picked | null {
  try {
    const value = JSON.parse(sessionStorage.getItem(ACCOUNT_KEY) ?? 'null') as Picked | null;
    return value && typeof value.id === 'string' && typeof value.name === 'string' ? value : null;
  } catch {
    return null;
  }
}

function App() {
  const [session, setSession] = useState<Session | null | undefined>(undefined);
  // The operator's chosen account (an id, not a secret), kept for this tab.
  const [picked, setPicked] = useState<Picked | null>(() => readPicked());
  const { path, search } = useLocation();

  const signedIn = useCallback((s: Session) => {
    setCsrf(s.csrf_token);
    setSession(s);
  }, []);

  useEffect(() => {
    whenSignedOut(() => {
      setCsrf('');
      setSession(null);
    });
    api<Session>('GET', '/admin/v1/session').then(signedIn, () => setSession(null));
  }, [signedIn]);

  const pickAccount = useCallback((account: Picked | null) => {
    if (account) sessionStorage.setItem(ACCOUNT_KEY, JSON.stringify(account));
    else sessionStorage.removeItem(ACCOUNT_KEY);
    setPicked(account);
  }, []);

  if (session === undefined) return <Loading />;
  if (session === null) {
    return (
      <SignInPage
        onSignedIn={(s) => {
          signedIn(s);
          navigate(s.role === 'operator' ? '/accounts' : '/keys', true);
        }}
      />
    );
  }

  const signOut = async () => {
    await api('DELETE', '/admin/v1/session').catch(() => undefined);
    setCsrf('');
    pickAccount(null);
    setSession(null);
    navigate('/', true);
  };

  const ctx: Ctx = {
    session,
    accountId: session.role === 'owner' ? (session.account?.id ?? null) : (picked?.id ?? null),
    pickAccount,
  };
  const operator = session.role === 'operator';
  const links: Array<[string, string]> = [
    ...(operator ? ([['/accounts', 'Accounts']] as Array<[string, string]>) : []),
    ['/keys', 'API keys'],
    ['/usage', 'Usage'],
    ['/predictions', 'Predictions'],
    ['/models', 'Models'],
    ...(operator ? [] : ([['/playground', 'Playground']] as Array<[string, string]>)),
    ['/incidents', 'Incidents'],
  ];

  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <strong class="brand">Gantry console</strong>
        <nav aria-label="Main">
          <ul>
            {links.map(([to, label]) => (
              <li key={to}>
                <Link to={to} aria-current={path.startsWith(to) ? 'page' : undefined}>
                  {label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <span class="who">
          {operator
            ? `Operator ${session.actor}${picked ? ` · account ${picked.name}` : ''}`
            : `${session.account?.name ?? ''} · key ${session.key?.prefix ?? ''}`}
        </span>
        <button type="button" onClick={signOut}>
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        <Page path={path} search={search} ctx={ctx} />
      </main>
    </>
  );
}

function Page({ path, search, ctx }: { path: string; search: URLSearchParams; ctx: Ctx }) {
  const parts = path.split('/').filter(Boolean);
  const [first, second, third] = parts;
  useEffect(() => {
    if (!first) navigate(ctx.session.role === 'operator' ? '/accounts' : '/keys', true);
  }, [first, ctx.session.role]);
  switch (first) {
    case 'accounts':
      return <AccountsPage ctx={ctx} />;
    case 'keys':
      return <KeysPage ctx={ctx} />;
    case 'usage':
      return <UsagePage ctx={ctx} />;
    case 'predictions':
      return second ? (
        <PredictionPage ctx={ctx} id={second} />
      ) : (
        <PredictionsPage ctx={ctx} search={search} />
      );
    case 'models':
      return second && third ? <ModelPage ctx={ctx} id={`${second}/${third}`} /> : <ModelsPage ctx={ctx} />;
    case 'playground':
      return <PlaygroundPage ctx={ctx} />;
    case 'incidents':
      return <IncidentsPage ctx={ctx} />;
    case undefined:
      return <Loading />;
    default:
      return (
        <section>
          <h1>Not found</h1>
          <p>
            There is no such page. <Link to="/keys">Go to your API keys</Link>.
          </p>
        </section>
      );
  }
}

const root = document.getElementById('app');
if (root) {
  root.textContent = '';
  render(<App />, root);
}
