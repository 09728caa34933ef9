// Bars with interval whiskers on the vendored Chart.js (window.Chart, static/vendor/).
// Chart.js has no error bars of its own; the whiskers are a ~30-line plugin below that draws,
// after the bars, a vertical line from each row's interval low to high with end caps, so no
// second library is needed. The bars are the noisy answers (post-processing of the release);
// the whiskers are the intervals the service sent, never recomputed here.

const whiskers = {
  id: "dpkitWhiskers",
  afterDatasetsDraw(chart) {
    const ds = chart.data.datasets[0];
    const intervals = ds && ds.intervals;
    if (!intervals) return;
    const meta = chart.getDatasetMeta(0);
    const y = chart.scales.y;
    const ctx = chart.ctx;
    ctx.save();
    ctx.strokeStyle = "#1f2933";
    ctx.lineWidth = 1.5;
    meta.data.forEach((bar, i) => {
      const iv = intervals[i];
      if (!iv || iv[0] === null || iv[1] === null) return;
      const x = bar.x;
      const top = y.getPixelForValue(iv[1]);
      const bottom = y.getPixelForValue(iv[0]);
      const cap = Math.max(3, Math.min(10, (bar.width || 12) / 4));
      ctx.beginPath();
      ctx.moveTo(x, top); ctx.lineTo(x, bottom);
      ctx.moveTo(x - cap, top); ctx.lineTo(x + cap, top);
      ctx.moveTo(x - cap, bottom); ctx.lineTo(x + cap, bottom);
      ctx.stroke();
    });
    ctx.restore();
  },
};

let current = null;

export function clearChart(canvas) {
  if (current) { current.destroy(); current = null; }
  delete canvas.dataset.bars;
  delete canvas.dataset.whiskers;
}

// labels: one per row; values: numbers (null for a missing value); intervals: [lo, hi] | null.
export function drawChart(canvas, { labels, values, intervals, measure, omitted = 0 }) {
  if (current) { current.destroy(); current = null; }
  const Chart = window.Chart;
  if (!Chart) throw new Error("the chart library did not load (static/vendor/chart.umd.min.js)");
  const ends = [0];
  values.forEach((v, i) => {
    if (v !== null) ends.push(v);
    const iv = intervals && intervals[i];
    if (iv) ends.push(...iv.filter((e) => e !== null));
  });
  current = new Chart(canvas, {
    type: "bar",
    data: {
      labels,
      datasets: [{
        label: measure,
        data: values,
        intervals,
        backgroundColor: "rgba(37, 99, 235, 0.55)",
        borderColor: "rgb(37, 99, 235)",
        borderWidth: 1,
      }],
    },
    options: {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      scales: {
        y: { suggestedMin: Math.min(...ends), suggestedMax: Math.max(...ends) },
        x: { ticks: { autoSkip: true, maxRotation: 60 } },
      },
      plugins: {
        legend: { display: false },
        tooltip: {
          callbacks: {
            afterLabel: (item) => {
              const iv = intervals && intervals[item.dataIndex];
              return iv ? `interval: ${iv[0]} to ${iv[1]}` : "";
            },
          },
        },
      },
    },
    plugins: [whiskers],
  });
  const n = values.length;
  const more = omitted ? ` (the first ${n}; ${omitted} more in the table)` : "";
  canvas.setAttribute("aria-label",
    `Bar chart of ${measure} over ${n} row${n === 1 ? "" : "s"}${more}, with interval whiskers; the same numbers are in the table below.`);
  canvas.dataset.bars = String(n);
  canvas.dataset.whiskers = String((intervals || []).filter(Boolean).length);
  return current;
}
