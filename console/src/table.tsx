/** Table pieces the console's pages share, so every list table heads its columns the same accessible way. */
import { money } from './components.js';

/**
 * A table's column heads. `actions` adds a last column for row buttons, named for screen readers only
 * (a visible "Actions" head over buttons says nothing a sighted user needs).
 */
export function ColumnHeads({ columns, actions = false }: { columns: string[]; actions?: boolean }) {
  return (
    <thead>
      <tr>
        {columns.map((c) => (
          <th scope="col" key={c}>
            {c}
          </th>
        ))}
        {actions ? (
          <th scope="col">
            <span class="sr-only">Actions</span>
          </th>
        ) : null}
      </tr>
    </thead>
  );
}

export interface Totals {
  requests: number;
  tokens: number;
  cost: number;
}

/** The usage tables' heads: what the rows are by, then the three totals. */
export function TotalsHeads({ by }: { by: string }) {
  return <ColumnHeads columns={[by, 'Requests', 'Tokens', 'Cost']} />;
}

/** One usage row: its name as the row head, then requests, tokens and cost (classes the tests read). */
export function TotalsCells({ name, totals }: { name: string; totals: Totals }) {
  return (
    <>
      <th scope="row">{name}</th>
      <td class="requests">{totals.requests}</td>
      <td class="tokens">{totals.tokens}</td>
      <td class="cost">{money(totals.cost)}</td>
    </>
  );
}
