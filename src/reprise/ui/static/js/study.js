/* One tuning study (/study?name=N): the optimisation history (each trial's value and the
   best so far), the parallel coordinates of params and value, the parameter importances,
   and the trials with their state, each linking to its run. */
"use strict";

R.page(async (main) => {
  const { h } = R;
  const name = R.params().get("name") || "";
  if (!name) {
    main.append(h("h1", {}, "Study"), h("p", {}, "No study named: ", h("a", { href: "/studies" }, "see the studies")));
    return;
  }
  const s = await R.api("/studies/" + encodeURIComponent(name));
  main.append(h("h1", {}, "Study ", h("span", { class: "mono" }, s.study)));
  const best = s.best;
  const settings = s.settings || {};
  main.append(R.section("Summary", R.kv({
    direction: s.direction, objective: settings.objective,
    trials: Object.entries(s.counts).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(", ") || "none",
    "best trial": best ? `#${best.number}` : null, "best value": best ? best.value : null,
    "best params": best ? Object.entries(best.params).map(([k, v]) => `${k}=${R.fmt(v)}`).join(", ") : null,
    "best run": best && best.run_id ? h("a", { href: R.link("run", { id: best.run_id }) }, best.run_id) : null,
  })));

  const done = s.trials.filter(t => t.state === "complete" && t.value !== null);
  const minimize = s.direction !== "maximize";
  if (done.length) {
    // best so far, in trial order
    let acc = null;
    const bestSoFar = done.map(t => (acc = acc === null ? t.value : (minimize ? Math.min(acc, t.value) : Math.max(acc, t.value))));
    const history = h("div", { id: "history", class: "chart" });
    const importances = h("div", { id: "importances", class: "chart" });
    main.append(h("div", { class: "row" }, R.section("Optimisation history", history),
      R.section("Parameter importances (fANOVA)", Object.keys(s.importances || {}).length
        ? importances : h("p", { class: "muted" }, "Too few complete trials, or every trial took the same params."))));
    R.chart(history, [
      { type: "scatter", mode: "markers", name: "value", x: done.map(t => t.number), y: done.map(t => t.value),
        marker: { size: 9, color: "#2f5fd0" }, hovertemplate: "trial %{x}: %{y}<extra></extra>" },
      { type: "scatter", mode: "lines", name: "best so far", x: done.map(t => t.number), y: bestSoFar,
        line: { shape: "hv", color: "#c62828" } },
    ], { xaxis: { title: { text: "trial" }, tickformat: "d" }, yaxis: { title: { text: "objective" } } });
    const imp = Object.entries(s.importances || {}).sort((a, b) => a[1] - b[1]);
    if (imp.length) {
      R.chart(importances, [{ type: "bar", orientation: "h", x: imp.map(e => e[1]), y: imp.map(e => R.plotText(e[0])),
        marker: { color: "#2f5fd0" } }], { xaxis: { title: { text: "importance" } }, margin: { l: 110, r: 20, t: 20, b: 40 } });
    }

    // parallel coordinates: one axis per param, then the value; each trial a line across
    // them. Drawn with SVG lines: Plotly's parcoords needs WebGL through regl, whose
    // shaders are compiled with new Function, which the dashboard's CSP forbids.
    const keys = [...new Set(done.flatMap(t => Object.keys(t.params)))].sort();
    if (keys.length) {
      const space = settings.space || {};
      const dims = keys.map(k => axisOf(k, done.map(t => t.params[k]), space[k] || {}));
      dims.push(axisOf("value", done.map(t => t.value), {}));
      const parcoords = h("div", { id: "parcoords", class: "chart" });
      main.append(R.section("Parallel coordinates", parcoords));
      drawParallel(parcoords, dims, done);
    }
  } else {
    main.append(h("p", { class: "muted" }, "No complete trial yet."));
  }

  const keys = [...new Set(s.trials.flatMap(t => Object.keys(t.params)))].sort();
  main.append(R.section("Trials", R.table([
    { label: "Trial", get: t => "#" + t.number },
    { label: "State", get: t => R.badge(t.state) },
    { label: "Value", get: t => t.value },
    ...keys.map(k => ({ label: k, get: t => t.params[k] })),
    { label: "Last step", get: t => t.last_step },
    { label: "Duration", get: t => R.duration(t.seconds) },
    { label: "Run", get: t => t.run_id ? h("a", { href: R.link("run", { id: t.run_id }) }, t.run_id) : null },
    { label: "Retry of", get: t => t.retry_of },
  ], s.trials, { class: "trials", rowAttrs: t => ({ dataset: { trial: t.number } }) })));
});

/** One axis of the parallel coordinates: each trial's position in [0, 1], and the ticks.
    Numbers on a linear (or the space's log) scale; choices, and anything not a number, as
    sorted categories. */
function axisOf(label, values, spec) {
  const present = values.filter(v => v !== undefined && v !== null);
  const log = Boolean(spec.log);
  if (spec.type !== "categorical" && present.length && present.every(v => typeof v === "number")) {
    const f = log && present.every(v => v > 0) ? Math.log10 : (v => v);
    const lo = Math.min(...present.map(f)), hi = Math.max(...present.map(f));
    const pos = v => (v === undefined || v === null ? null : hi > lo ? (f(v) - lo) / (hi - lo) : 0.5);
    const ticks = hi > lo ? [0, 0.5, 1].map(p => ({ y: p, text: R.fmt(log ? 10 ** (lo + p * (hi - lo)) : lo + p * (hi - lo)) }))
      : [{ y: 0.5, text: R.fmt(present[0]) }];
    return { label: log ? `${label} (log)` : label, y: values.map(pos), ticks };
  }
  const numbers = present.every(v => typeof v === "number");
  const cats = [...new Set(present)].sort((a, b) => (numbers ? a - b : String(a) < String(b) ? -1 : 1)).map(String);
  const pos = v => (v === undefined || v === null ? null : cats.length > 1 ? cats.indexOf(String(v)) / (cats.length - 1) : 0.5);
  return { label, y: values.map(pos), ticks: cats.map(c => ({ y: pos(c), text: c })) };
}

function drawParallel(div, dims, trials) {
  const values = trials.map(t => t.value);
  const lo = Math.min(...values), hi = Math.max(...values);
  const colors = ["#440154", "#3b528b", "#21918c", "#5ec962", "#fde725"];  // viridis
  const bin = v => (hi > lo ? Math.min(colors.length - 1, Math.floor((v - lo) / (hi - lo) * colors.length)) : 0);
  // one trace per colour: every trial of that colour, separated by gaps
  const traces = colors.map((color, c) => {
    const x = [], y = [], text = [];
    trials.forEach((t, i) => {
      if (bin(t.value) !== c) return;
      dims.forEach((d, k) => { x.push(k); y.push(d.y[i]); text.push(`trial ${t.number}: ${R.fmt(t.value)}`); });
      x.push(null); y.push(null); text.push(null);
    });
    return { type: "scatter", mode: "lines+markers", x, y, text, hoverinfo: "text", showlegend: false,
             line: { color, width: 2 }, marker: { color, size: 5 }, connectgaps: false };
  }).filter(t => t.x.length);
  const shapes = dims.map((_, k) => ({ type: "line", x0: k, x1: k, y0: 0, y1: 1, xref: "x", yref: "y",
                                       line: { color: "#6b7280", width: 1 } }));
  const annotations = dims.flatMap((d, k) => [
    { x: k, y: 1.08, xref: "x", yref: "y", text: R.plotText(d.label), showarrow: false,
      font: { size: 13 }, yanchor: "bottom", captureevents: false },
    ...d.ticks.map(t => ({ x: k, y: t.y, xref: "x", yref: "y", text: R.plotText(t.text), showarrow: false,
                           xanchor: "right", xshift: -4, font: { size: 11, color: "#374151" } })),
  ]);
  R.chart(div, traces, {
    shapes, annotations, hovermode: "closest", margin: { l: 90, r: 30, t: 40, b: 20 },
    xaxis: { visible: false, range: [-0.6, dims.length - 0.7], fixedrange: true },
    yaxis: { visible: false, range: [-0.08, 1.2], fixedrange: true },
  });
}
