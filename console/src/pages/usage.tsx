import { useEffect, useState } from 'preact/hooks';
import { api, errorText, query } from '../api.js';
import { type Bar, BarChart } from '../chart.js';
import { ErrorMessage, Loading, money } from '../components.js';
import { type Totals, TotalsCells, TotalsHeads } from '../table.js';
import type { Ctx } from './ctx.js';
import { NeedAccount } from './need-account.js';

interface Row {
  day: string;
  account_id: string;
  model: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cost: number;
}

type Metric = keyof Totals;
const METRICS: Array<[Metric, string]> = [
  ['requests', 'Requests'],
  ['tokens', 'Tokens'],
  ['cost', 'Cost'],
];

/** YYYY-MM-DD of a date, in UTC as the usage days are. */
function isoDay(date: Date): string {
  return date.toISOString().slice(0, 10);
}

function daysBetween(from: string, to: string): string[] {
  const out: string[] = [];
  const end = new Date(`${to}T00:00:00Z`).getTime();
  for (let t = new Date(`${from}T00:00:00Z`).getTime(); t <= end && out.length < 400; t += 86_400_000) {
    out.push(isoDay(new Date(t)));
  }
  return out;
}

function add(into: Totals, row: Row): void {
  into.requests += row.requests;
  into.tokens += row.input_tokens + row.output_tokens;
  into.cost += row.cost;
}

const fmt = (metric: Metric) => (v: number) => (metric === 'cost' ? money(v) : v.toLocaleString());

export function UsagePage({ ctx }: { ctx: Ctx }) {
  const account = ctx.accountId;
  const [to, setTo] = useState(() => isoDay(new Date()));
  const [from, setFrom] = useState(() => isoDay(new Date(Date.now() - 29 * 86_400_000)));
  const [rows, setRows] = useState<Row[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [metric, setMetric] = useState<Metric>('requests');

  useEffect(() => {
    if (!account) return;
    setRows(null);
    api<{ data: Row[] }>('GET', `/admin/v1/usage${query({ account, from, to })}`).then(
      (answer) => {
        setRows(answer.data);
        setError(null);
      },
      (err) => setError(errorText(err)),
    );
  }, [account, from, to]);

  if (!account) return <NeedAccount title="Usage" />;

  const byDay = new Map<string, Totals>(
    daysBetween(from, to).map((d) => [d, { requests: 0, tokens: 0, cost: 0 }]),
  );
  const byModel = new Map<string, Totals>();
  for (const row of rows ?? []) {
    const day = byDay.get(row.day) ?? { requests: 0, tokens: 0, cost: 0 };
    add(day, row);
    byDay.set(row.day, day);
    const model = byModel.get(row.model) ?? { requests: 0, tokens: 0, cost: 0 };
    add(model, row);
    byModel.set(row.model, model);
  }
  const days = [...byDay.entries()].sort(([a], [b]) => a.localeCompare(b));
  const bars: Bar[] = days.map(([day, t]) => ({ label: day, value: t[metric] }));
  const label = METRICS.find(([m]) => m === metric)?.[1] ?? '';

  return (
    <section>
      <h1>Usage</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          From{' '}
          <input type="date" value={from} onChange={(e) => setFrom((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          To <input type="date" value={to} onChange={(e) => setTo((e.target as HTMLInputElement).value)} />
        </label>
        <fieldset class="metric">
          <legend>Chart</legend>
          {METRICS.map(([m, text]) => (
            <label key={m}>
              <input type="radio" name="metric" checked={metric === m} onChange={() => setMetric(m)} /> {text}
            </label>
          ))}
        </fieldset>
      </form>
      <ErrorMessage error={error} />
      {rows === null && !error ? (
        <Loading />
      ) : (
        <>
          <div class="usage">
            <figure>
              <BarChart bars={bars} title={`${label} per day`} format={fmt(metric)} />
              <figcaption>{label} per day (UTC), the numbers are in the table.</figcaption>
            </figure>
            <div class="scroll">
              <table class="usage-days">
                <caption>Per day</caption>
                <TotalsHeads by="Day" />
                <tbody>
                  {days
                    .filter(([, t]) => t.requests > 0)
                    .reverse()
                    .map(([day, t]) => (
                      <tr key={day} data-day={day}>
                        <TotalsCells name={day} totals={t} />
                      </tr>
                    ))}
                </tbody>
              </table>
            </div>
          </div>
          <table class="usage-models">
            <caption>Per model</caption>
            <TotalsHeads by="Model" />
            <tbody>
              {[...byModel.entries()]
                .sort(([, a], [, b]) => b.requests - a.requests)
                .map(([model, t]) => (
                  <tr key={model} data-model={model}>
                    <TotalsCells name={model} totals={t} />
                  </tr>
                ))}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}
