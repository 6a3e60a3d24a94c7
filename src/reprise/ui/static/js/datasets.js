/* Datasets: every registered dataset with its versions (/api/datasets); each version links
   to its page (schema, profile, diff). */
"use strict";

R.page(async (main) => {
  const { h } = R;
  main.append(h("h1", {}, "Datasets"));
  const data = await R.api("/datasets");
  if (!data.datasets.length) {
    main.append(h("p", { class: "muted" }, "No datasets yet: `reprise data add NAME FILE` registers one."));
    return;
  }
  for (const d of data.datasets) {
    main.append(h("section", { class: "card dataset" },
      h("h2", {}, h("a", { href: R.link("dataset", { name: d.name }) }, d.name),
        h("span", { class: "muted" }, ` — ${d.versions} version${d.versions === 1 ? "" : "s"}, newest @${d.latest}`)),
      R.table([
        { label: "Version", get: v => h("a", { href: R.link("dataset", { name: d.name, version: v.version }) }, v.ref) },
        { label: "Format", get: v => v.format },
        { label: "Rows", get: v => v.rows },
        { label: "Columns", get: v => v.columns },
        { label: "Size", get: v => v.size },
        { label: "Failing rows", get: v => v.failing_rows },
        { label: "Source", get: v => v.source },
        { label: "Hash", get: v => h("span", { class: "mono" }, v.hash.slice(0, 16)) },
        { label: "Added", get: v => R.time(v.created_at) },
      ], d.versions_list, { class: "versions" })));
  }
});
