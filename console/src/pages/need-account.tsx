import { Link } from '../router.js';

/** An operator's page before an account is picked. */
export function NeedAccount({ title }: { title: string }) {
  return (
    <section>
      <h1>{title}</h1>
      <p>
        Pick an account first on the <Link to="/accounts">Accounts</Link> page.
      </p>
    </section>
  );
}
