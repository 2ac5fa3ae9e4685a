import type { Session } from '../api.js';

/** What every page gets: the session and the account it works on (the owner's own, or the operator's pick). */
export interface Ctx {
  session: Session;
  accountId: string | null;
  pickAccount: (account: { id: string; name: string } | null) => void;
}
