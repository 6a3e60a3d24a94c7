/* Studies: the workspace's tuning studies (/api/studies), each linking to its page. */
"use strict";

R.page(async (main) => {
  const { h } = R;
  main.append(h("h1", {}, "Studies"));
  const data = await R.api("/studies");
  if (!data.studies.length) {
    main.append(h("p", { class: "muted" }, "No studies yet: `reprise tune FILE.py:PIPELINE --space SPACE.yaml ...` starts one."));
    return;
  }
  main.append(R.table([
    { label: "Study", get: s => h("a", { href: R.link("study", { name: s.study }) }, s.study) },
    { label: "Direction", get: s => s.direction },
    { label: "Trials", get: s => s.trials },
    { label: "Best value", get: s => s.best_value },
    { label: "Best params", get: s => s.best_params ? Object.entries(s.best_params).map(([k, v]) => `${k}=${R.fmt(v)}`).join(", ") : null },
    { label: "Started", get: s => R.time(s.started) },
  ], data.studies, { class: "studies" }));
});
