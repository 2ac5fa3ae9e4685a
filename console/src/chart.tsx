/**
 * Bars drawn as SVG by hand: a few dozen rects need no chart library. The chart is an image with a summary
 * label; the numbers themselves are in the table shown beside it, which is what screen readers use.
 */
export interface Bar {
  label: string;
  value: number;
}

export function BarChart({
  bars,
  title,
  format,
}: {
  bars: Bar[];
  title: string;
  format: (v: number) => string;
}) {
  const width = 640;
  const height = 220;
  const pad = { top: 16, bottom: 28, left: 8, right: 8 };
  const max = Math.max(0, ...bars.map((b) => b.value));
  const inner = height - pad.top - pad.bottom;
  const step = bars.length ? (width - pad.left - pad.right) / bars.length : 0;
  const total = bars.reduce((sum, b) => sum + b.value, 0);
  return (
    <svg
      class="chart"
      viewBox={`0 0 ${width} ${height}`}
      role="img"
      aria-label={`${title}: ${format(total)} in total over ${bars.length} days`}
    >
      <title>{title}</title>
      <line
        x1={pad.left}
        x2={width - pad.right}
        y1={height - pad.bottom}
        y2={height - pad.bottom}
        class="axis"
      />
      {bars.map((b, i) => {
        const h = max > 0 ? (b.value / max) * inner : 0;
        const x = pad.left + i * step;
        return (
          <rect
            key={b.label}
            class="bar"
            data-day={b.label}
            data-value={String(b.value)}
            x={x + step * 0.15}
            y={height - pad.bottom - h}
            width={Math.max(1, step * 0.7)}
            height={h}
          >
            <title>{`${b.label}: ${format(b.value)}`}</title>
          </rect>
        );
      })}
      {bars.length > 0 ? (
        <>
          <text x={pad.left} y={height - 8} class="tick">
            {bars[0]?.label}
          </text>
          <text x={width - pad.right} y={height - 8} class="tick" text-anchor="end">
            {bars[bars.length - 1]?.label}
          </text>
          <text x={pad.left} y={12} class="tick">
            {`max ${format(max)}`}
          </text>
        </>
      ) : null}
    </svg>
  );
}
