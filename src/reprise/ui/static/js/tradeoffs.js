/* Trade-offs: a model's versions (and a study's trials) as points: a quality metric against
   p99 latency, cost per 1,000 predictions or the energy of the training. Clicking a point
   opens its run. ?model=NAME&study=NAME&metric=KEY&usd_per_hour=X&x=p99_ms|cost_per_1k|energy_joules */
"use strict";

R.page(async (main) => {
  const q = R.params();
  const args = new URLSearchParams();
  for (const k of ["model", "study", "metric", "usd_per_hour"]) if (q.get(k)) args.set(k, q.get(k));
  const d = await R.api("/tradeoffs" + (args.toString() ? "?" + args : ""));
  const AXES = {
    p99_ms: { label: "p99 latency (ms)", fmt: v => R.fmt(v, 3) + " ms" },
    cost_per_1k: { label: `cost per 1,000 predictions ($, at $${d.usd_per_hour}/hour)`, fmt: v => "$" + Number(v).toPrecision(3) },
    energy_joules: { label: "energy of the training (J)", fmt: v => R.fmt(v, 4) + " J" },
  };
  const NOT = "not measured";

  main.append(R.h("h1", {}, "Trade-offs"));
  const go = (changes) => {
    const next = Object.fromEntries(q.entries());
    Object.assign(next, changes);
    for (const k of Object.keys(next)) if (next[k] === "" || next[k] === null) delete next[k];
    location.href = R.link("tradeoffs", next);
  };
  const select = (label, name, options, value) => R.h("label", {}, label + " ",
    R.h("select", { name, "aria-label": label, onchange: e => go({ [name]: e.target.value }) },
      options.map(([v, text]) => R.h("option", { value: v, selected: v === (value || "") }, text))));
  const xAxis = AXES[q.get("x")] ? q.get("x") : "p99_ms";
  const price = R.h("input", { type: "text", name: "usd_per_hour", value: String(d.usd_per_hour), size: 6,
                               "aria-label": "dollars per hour" });
  main.append(R.h("div", { class: "toolbar" },
    select("Model", "model", [["", d.study ? "none" : "every model"], ...d.models.map(m => [m, m])], d.model),
    select("Study", "study", [["", "none"], ...d.studies.map(s => [s, s])], d.study),
    select("Metric", "metric", [...new Set([d.metric, ...d.metrics_available])].map(m => [m, m]), d.metric),
    select("Against", "x", Object.entries(AXES).map(([k, a]) => [k, a.label]), xAxis),
    R.h("form", { onsubmit: e => { e.preventDefault(); go({ usd_per_hour: price.value }); } },
      R.h("label", {}, "$/hour ", price), " ", R.h("button", { type: "submit" }, "Apply"))));

  const plotted = d.points.filter(p => p.metric !== null && p[xAxis] !== null);
  const chart = R.h("div", { class: "chart", id: "tradeoffs" });
  main.append(R.section(`${d.metric} against ${AXES[xAxis].label}`, chart,
    R.h("p", { class: "muted" }, `${plotted.length} of ${d.points.length} points have both figures; `,
      "click a point to open its run. Cost is computed, not measured: ", d.cost_formula,
      `, at $${d.usd_per_hour}/hour (the default is $1/hour; set usd_per_hour).`)));
  const kinds = [...new Set(plotted.map(p => p.kind))];
  R.chart(chart, kinds.map(kind => {
    const pts = plotted.filter(p => p.kind === kind);
    return {
      x: pts.map(p => p[xAxis]), y: pts.map(p => p.metric), customdata: pts.map(p => p.run_id),
      text: pts.map(p => p.label), type: "scatter", mode: "markers+text", textposition: "top center",
      marker: { size: 12, symbol: kind === "trial" ? "diamond" : "circle" },
      name: kind === "trial" ? "trials" : "versions",
      hovertemplate: "%{text}<br>%{x}<br>" + d.metric + " %{y}<extra></extra>",
    };
  }), { xaxis: { title: { text: AXES[xAxis].label } }, yaxis: { title: { text: d.metric } },
        annotations: plotted.length ? [] : [{ text: "nothing to plot: no point has both figures",
                                              showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }] });
  chart.on("plotly_click", ev => {
    const p = ev.points && ev.points[0];
    if (p && p.customdata) location.href = R.link("run", { id: p.customdata });
  });

  const or = (v, f) => (v === null || v === undefined) ? R.h("span", { class: "muted" }, NOT) : f(v);
  main.append(R.section("Figures", R.table([
    { label: "Point", get: p => p.label },
    { label: "Run", get: p => p.run_id ? R.h("a", { href: R.link("run", { id: p.run_id }) }, p.run_id) : "—" },
    { label: d.metric, get: p => or(p.metric, v => R.fmt(v)) },
    { label: "p50", get: p => or(p.p50_ms, AXES.p99_ms.fmt) },
    { label: "p99", get: p => or(p.p99_ms, AXES.p99_ms.fmt) },
    { label: "Latency from", get: p => p.latency_source || "—", class: "reason" },
    { label: "Cost / 1,000", get: p => or(p.cost_per_1k, AXES.cost_per_1k.fmt) },
    { label: "Energy", get: p => or(p.energy_joules, v => AXES.energy_joules.fmt(v) + (p.energy_source ? ` (${p.energy_source})` : "")) },
  ], d.points, { class: "points" })));
});
