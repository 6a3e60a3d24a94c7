/* Runs: the runs table from /api/runs. */
"use strict";

R.page(async (main) => {
  main.append(R.h("h1", {}, "Runs"));
  const data = await R.api("/runs?limit=100");
  main.append(R.table([
    { label: "Run", get: r => R.h("a", { href: R.link("run", { id: r.id }) }, r.id) },
    { label: "Name", get: r => r.name },
    { label: "Status", get: r => R.badge(r.status) },
    { label: "Started", get: r => R.time(r.started_at) },
  ], data.runs, { class: "runs" }));
});
