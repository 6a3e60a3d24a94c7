/* One dataset version (/dataset?name=N&version=V): its source and validation, its schema
   with the profile `reprise data add` computed (a histogram or the most frequent values per
   column), its other versions, and the diff of any two versions (`reprise data diff`). */
"use strict";

R.page(async (main) => {
  const { h } = R;
  const q = R.params();
  const name = q.get("name") || "";
  if (!name) {
    main.append(h("h1", {}, "Dataset"), h("p", {}, "No dataset named: ",
      h("a", { href: "/datasets" }, "see the datasets")));
    return;
  }
  const d = await R.api(`/datasets/${encodeURIComponent(name)}?version=${encodeURIComponent(q.get("version") || "latest")}`);
  main.append(h("h1", {}, "Dataset ", h("span", { class: "mono" }, d.ref)));
  const validation = (d.meta && d.meta.validation) || {};
  main.append(h("div", { class: "row" },
    R.section("Version", R.kv({
      format: d.format, rows: d.rows, columns: d.columns, size: d.size, source: d.source,
      hash: h("span", { class: "mono" }, d.hash), added: R.time(d.created_at),
      schema: d.meta && d.meta.schema, validated: validation.rows !== undefined
        ? `${validation.rows} rows, ${validation.failing_rows} failing` : null,
    })),
    R.section("Versions", R.table([
      { label: "Version", get: v => v.version === d.version ? h("strong", {}, v.ref)
        : h("a", { href: R.link("dataset", { name: d.name, version: v.version }) }, v.ref) },
      { label: "Rows", get: v => v.rows },
      { label: "Hash", get: v => h("span", { class: "mono" }, v.hash.slice(0, 16)) },
      { label: "Added", get: v => R.time(v.created_at) },
    ], d.versions, { class: "versions" }))));

  const profile = (d.profile && d.profile.columns) || {};
  const schema = d.schema || {};
  const names = Object.keys(schema).length ? Object.keys(schema) : Object.keys(profile);
  if (names.length) {
    const chartDiv = h("div", { id: "histogram", class: "chart" });
    const pick = h("select", { "aria-label": "column", id: "histogram-column",
      onchange: () => draw(pick.value) }, names.map(c => h("option", { value: c }, c)));
    const col = c => profile[c] || {};
    main.append(h("div", { class: "row" },
      R.section("Schema and profile", R.table([
        { label: "Column", get: c => h("a", { href: "#histogram", onclick: ev => {
          ev.preventDefault(); pick.value = c; draw(c);
        } }, c) },
        { label: "Type", get: c => schema[c] || col(c).type },
        { label: "Kind", get: c => col(c).kind },
        { label: "Nulls", get: c => col(c).nulls },
        { label: "Distinct", get: c => col(c).distinct },
        { label: "Min", get: c => col(c).min },
        { label: "Mean", get: c => col(c).mean },
        { label: "Max", get: c => col(c).max },
      ], names, { class: "schema" })),
      R.section("Distribution", h("div", { class: "toolbar" }, "Column ", pick), chartDiv)));

    function draw(c) {
      const p = col(c);
      const hist = p.histogram;
      if (hist && hist.counts && hist.counts.length) {
        const e = hist.edges;
        R.chart(chartDiv, [{ type: "bar", name: R.plotText(c), y: hist.counts,
          x: hist.counts.map((_, i) => (e[i] + e[i + 1]) / 2),
          width: hist.counts.map((_, i) => e[i + 1] - e[i]),
          marker: { color: "#2f5fd0", line: { width: 1, color: "#fff" } },
          hovertemplate: "%{x}: %{y}<extra></extra>" }],
        { xaxis: { title: { text: R.plotText(c) } }, yaxis: { title: { text: "rows" } }, bargap: 0 });
      } else if (p.top && p.top.length) {
        R.chart(chartDiv, [{ type: "bar", name: R.plotText(c), x: p.top.map(t => R.plotText(t[0])),
          y: p.top.map(t => t[1]), marker: { color: "#2f5fd0" } }],
        { xaxis: { title: { text: R.plotText(c) }, type: "category" }, yaxis: { title: { text: "rows" } } });
      } else {
        Plotly.purge(chartDiv);
        chartDiv.replaceChildren(h("p", { class: "muted" }, `No histogram for ${c}.`));
      }
    }
    const first = names.find(c => col(c).kind === "numeric" && c !== "id") || names[0];
    pick.value = first;
    draw(first);
  }

  if (!names.length && d.profile) {  // a folder or a file: counts, sizes, extensions
    main.append(R.section("Profile", R.kv(d.profile)));
  }

  // the diff of two versions
  const diffOut = h("div", { id: "diff" });
  const options = sel => d.versions.map(v => h("option", { value: v.version, selected: v.version === sel }, v.ref));
  // this version against the one before it (the oldest: against the newest)
  const older = d.versions.find(v => v.version < d.version);
  const pair = older ? [older.version, d.version] : [d.version, d.versions[0].version];
  const oldSel = h("select", { "aria-label": "old version", id: "diff-old" }, options(pair[0]));
  const newSel = h("select", { "aria-label": "new version", id: "diff-new" }, options(pair[1]));
  const compare = async () => {
    diffOut.replaceChildren(h("p", { class: "muted" }, "Comparing…"));
    try {
      showDiff(await R.api(`/datasets/${encodeURIComponent(d.name)}/diff?old=${oldSel.value}&new=${newSel.value}`));
    } catch (err) {
      diffOut.replaceChildren(h("div", { class: "error", role: "alert" }, err.message));
    }
  };
  main.append(R.section("Compare versions", h("div", { class: "toolbar" }, oldSel, "→", newSel,
    h("button", { type: "button", class: "primary", id: "diff-go", onclick: compare }, "Compare")), diffOut));

  function showDiff(x) {
    const parts = [h("p", {}, h("span", { class: "mono" }, x.old), " → ",
      h("span", { class: "mono" }, x.new), ": ",
      x.identical ? h("strong", {}, "identical bytes") : "different bytes")];
    const summary = {};
    if (x.rows) summary.rows = `${R.fmt(x.rows.old)} → ${R.fmt(x.rows.new)}`;
    if (x.columns_added) summary["columns added"] = x.columns_added.join(", ") || "none";
    if (x.columns_removed) summary["columns removed"] = x.columns_removed.join(", ") || "none";
    if (x.type_changes) summary["type changes"] = x.type_changes.map(t => `${t[0]}: ${t[1]} → ${t[2]}`).join(", ") || "none";
    for (const k of ["files", "bytes"]) if (x[k]) summary[k] = `${R.fmt(x[k].old)} → ${R.fmt(x[k].new)}`;
    for (const k of ["added", "removed", "changed"]) if (Array.isArray(x[k])) summary[`files ${k}`] = x[k].length;
    parts.push(R.kv(summary));
    // one row per changed column, one cell per statistic: old → new
    const changed = Object.entries(x.columns || {});
    const stats = [...new Set(changed.flatMap(([, st]) => Object.keys(st)))];
    const cellOf = v => (v && typeof v === "object" && !Array.isArray(v) && "old" in v
      ? `${R.fmt(v.old)} → ${R.fmt(v.new)}` : Array.isArray(v) ? v.join(", ") : v);
    parts.push(changed.length ? R.table([
      { label: "Column", get: ([c]) => c },
      ...stats.map(k => ({ label: k.replace(/_/g, " "), get: ([, st]) => (k in st ? cellOf(st[k]) : "") })),
    ], changed, { class: "diff-columns" }) : h("p", { class: "muted" }, "No column statistic changed."));
    diffOut.replaceChildren(...parts);
  }
  if (d.versions.length > 1) await compare();
  else diffOut.replaceChildren(h("p", { class: "muted" }, "This dataset has one version."));
});
