/* Compare: 2..N runs side by side from /api/compare (params that differ, final metrics,
   environment and output differences) and their common metrics overlaid, one chart per
   metric, one line per run (/api/runs/{id}/metrics/{key}). */
"use strict";

R.page(async (main) => {
  const h = R.h;
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const FIRST_CHARTS = 12;
  const ids = (R.params().get("ids") || "").split(",").map(s => s.trim()).filter(Boolean);
  main.append(h("h1", {}, "Compare runs"));
  if (ids.length < 2) {
    main.append(h("p", { class: "error", role: "alert" },
      "Select two runs or more on the ", h("a", { href: "/runs" }, "Runs"),
      " page and press Compare."));
    return;
  }
  const data = await R.api("/compare?" + new URLSearchParams({ ids: ids.join(",") }));
  const runs = data.runs;
  const color = i => COLORS[i % COLORS.length];
  const label = (r) => `${r.name} · ${r.id.slice(-6)}`;
  const runHeads = () => runs.map((r, i) => h("th", { class: "run-col" },
    h("span", { class: "swatch", style: `background:${color(i)}` }), label(r)));

  // -- the runs ---------------------------------------------------------------------------
  main.append(R.section("Runs", R.table([
    { label: "", get: r => h("span", { class: "swatch", style: `background:${color(runs.indexOf(r))}` }) },
    { label: "Run", get: r => h("a", { class: "mono", href: R.link("run", { id: r.id }) }, r.id) },
    { label: "Name", get: r => r.name },
    { label: "Kind", get: r => r.kind },
    { label: "Status", get: r => R.badge(r.status) },
    { label: "Started", get: r => R.time(r.started_at) },
    { label: "Duration", get: r => R.duration(r.duration) },
  ], runs, { class: "compare-runs" })));

  // -- a side-by-side table with a "show all" toggle ----------------------------------------
  function diffSection(title, id, rowsIn, render, what) {
    const holder = h("div", {});
    const differing = rowsIn.filter(r => r.differs).length;
    const box = h("input", { type: "checkbox", id: id + "-all", onchange: () => draw() });
    const draw = () => {
      const shown = box.checked ? rowsIn : rowsIn.filter(r => r.differs);
      if (!shown.length) {
        holder.replaceChildren(h("p", { class: "muted" }, rowsIn.length
          ? `All ${rowsIn.length} ${what} are the same.` : `No ${what}.`));
        return;
      }
      holder.replaceChildren(h("table", { class: "grid compare", id: id + "-table" },
        h("thead", {}, h("tr", {}, h("th", {}, what), runHeads())),
        h("tbody", {}, shown.map(row => h("tr", { class: row.differs ? "differs" : "same" },
          h("th", { class: "mono key" }, row.key),
          row.values.map(v => h("td", { class: "mono" }, render(v))))))));
    };
    draw();
    return R.section(title, h("p", { class: "muted" },
      `${differing} of ${rowsIn.length} ${what} differ. `,
      h("label", { for: box.id }, box, ` show all ${what}`)), holder);
  }

  main.append(diffSection("Params", "params", data.params, v => R.fmt(v), "params"));

  // -- final metrics (all, differing ones highlighted) -----------------------------------------
  const metricsBox = h("div", { class: "table-wrap" }, h("table", { class: "grid compare", id: "metrics-table" },
    h("thead", {}, h("tr", {}, h("th", {}, "metric"), runHeads())),
    h("tbody", {}, data.metrics.map(row => h("tr", { class: row.differs ? "differs" : "same" },
      h("th", { class: "mono key" }, row.key), row.values.map(v => h("td", { class: "num" }, R.fmt(v))))))));
  main.append(R.section("Final metrics", data.metrics.length ? metricsBox
    : h("p", { class: "muted" }, "No metrics.")));

  // -- charts: one per metric every run logged ---------------------------------------------
  const charts = h("div", { class: "charts" });
  const chartsNote = h("p", { class: "muted" });
  main.append(R.section("Metrics over steps", chartsNote, charts));
  const series = (id, key) => R.api(`/runs/${encodeURIComponent(id)}/metrics/` +
    key.split("/").map(encodeURIComponent).join("/") + "?max_points=1000");

  async function drawChart(key) {
    const div = h("div", { class: "chart", "data-metric": key });
    charts.append(h("div", { class: "chart-box" }, div));
    const all = await Promise.all(runs.map(r => series(r.id, key)));
    const traces = all.map((s, i) => ({
      x: s.xs, y: s.ys, name: R.plotText(label(runs[i])), type: "scatter",
      mode: s.xs.length > 1 ? "lines" : "lines+markers", line: { color: color(i), width: 1.5 },
    }));
    await R.chart(div, traces, { title: { text: R.plotText(key), font: { size: 13 } },
      xaxis: { title: { text: "step" } }, showlegend: true, margin: { l: 55, r: 20, t: 30, b: 70 },
      legend: { orientation: "h", y: -0.28 } });
  }

  async function drawCharts(keys) {
    for (let i = 0; i < keys.length; i += 4) await Promise.all(keys.slice(i, i + 4).map(drawChart));
  }

  const common = data.common_metrics;
  if (!common.length) chartsNote.textContent = "These runs logged no metric in common.";
  else {
    chartsNote.textContent = `${common.length} metric${common.length === 1 ? "" : "s"} ` +
      "logged by every run.";
    if (common.length > FIRST_CHARTS) {
      const more = h("button", { type: "button", onclick: async () => {
        more.remove(); await drawCharts(common.slice(FIRST_CHARTS));
      } }, `Show all ${common.length} charts`);
      chartsNote.append(" ", more);
    }
  }

  // -- environment ------------------------------------------------------------------------
  const env = data.environment;
  const envParts = [h("table", { class: "grid compare" },
    h("thead", {}, h("tr", {}, h("th", {}, ""), runHeads())),
    h("tbody", {},
      h("tr", {}, h("th", {}, "python"), env.python.map(v => h("td", { class: "mono" }, R.fmt(v)))),
      h("tr", {}, h("th", {}, "environment"), env.hashes.map((v, i) => h("td", { class: "mono",
        title: v || "" }, v ? v.slice(0, 12) : (env.recorded[i] ? "—" : "not recorded"))))))];
  const packages = env.differs.filter(d => d.section === "packages");
  const others = env.differs.filter(d => d.section !== "packages");
  const envTable = (rows, what, id) => h("table", { class: "grid compare", id },
    h("thead", {}, h("tr", {}, h("th", {}, what), runHeads())),
    h("tbody", {}, rows.map(d => h("tr", { class: "differs" },
      h("th", { class: "mono key" }, d.section === "packages" ? d.key : d.section + "." + d.key),
      d.values.map(v => h("td", { class: "mono" }, v === null || v === undefined ? "absent" : R.fmt(v)))))));
  if (!env.differs.length) envParts.push(h("p", { class: "muted", id: "env-same" }, "The environments are the same."));
  if (packages.length) envParts.push(h("h3", {}, `Packages that differ (${packages.length})`), envTable(packages, "package", "env-packages"));
  if (others.length) envParts.push(h("h3", {}, `Other differences (${others.length})`), envTable(others, "entry", "env-other"));
  main.append(R.section("Environment", ...envParts));

  // -- output hashes ------------------------------------------------------------------------
  const short = v => v ? h("span", { title: v }, String(v).slice(0, 12)) : "—";
  main.append(diffSection("Outputs", "outputs", data.outputs, short, "outputs"));

  await drawCharts(common.slice(0, FIRST_CHARTS));
});
