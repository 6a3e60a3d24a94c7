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
    ], { xaxis: { title: { text: "trial" }, dtick: 1 }, yaxis: { title: { text: "objective" } } });
    const imp = Object.entries(s.importances || {}).sort((a, b) => a[1] - b[1]);
    if (imp.length) {
      R.chart(importances, [{ type: "bar", orientation: "h", x: imp.map(e => e[1]), y: imp.map(e => e[0]),
        marker: { color: "#2f5fd0" } }], { xaxis: { title: { text: "importance" } }, margin: { l: 110, r: 20, t: 20, b: 40 } });
    }

    // parallel coordinates: one axis per param (categories and strings as indexes), then the value
    const keys = [...new Set(done.flatMap(t => Object.keys(t.params)))].sort();
    if (keys.length) {
      const dims = keys.map(k => {
        const vals = done.map(t => t.params[k]);
        if (vals.every(v => typeof v === "number")) {
          const log = vals.every(v => v > 0) && Math.max(...vals) / Math.min(...vals) > 100;
          return log ? { label: `${k} (log10)`, values: vals.map(v => Math.log10(v)) } : { label: k, values: vals };
        }
        const cats = [...new Set(vals.map(String))].sort();
        return { label: k, values: vals.map(v => cats.indexOf(String(v))), tickvals: cats.map((_, i) => i), ticktext: cats };
      });
      dims.push({ label: "value", values: done.map(t => t.value) });
      const parcoords = h("div", { id: "parcoords", class: "chart" });
      main.append(R.section("Parallel coordinates", parcoords));
      R.chart(parcoords, [{ type: "parcoords", dimensions: dims,
        line: { color: done.map(t => t.value), colorscale: "Viridis", reversescale: minimize, showscale: true } }],
      { margin: { l: 60, r: 60, t: 50, b: 30 } });
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
