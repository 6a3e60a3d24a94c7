/* Rollouts: every rollout of every model, newest first, from /api/rollouts. */
"use strict";

R.page(async (main) => {
  main.append(R.h("h1", {}, "Rollouts"));
  const data = await R.api("/rollouts");
  if (!data.rollouts.length) {
    main.append(R.h("p", { class: "muted empty" }, "No rollouts yet. Start one with ",
      R.h("code", {}, "reprise rollout start NAME VERSION"), "."));
    return;
  }
  const where = r => r.strategy === "canary"
    ? `step ${r.step + 1}/${r.steps.length} · ${R.fmt(r.weight)}%`
    : `${r.phase} · ${R.fmt(r.weight)}%`;
  main.append(R.table([
    { label: "Rollout", get: r => R.h("a", { href: R.link("rollout", { id: r.id }) }, r.id) },
    { label: "Model", get: r => r.ref },
    { label: "Candidate", get: r => "v" + r.candidate },
    { label: "Stable", get: r => "v" + r.stable },
    { label: "Strategy", get: r => r.strategy },
    { label: "State", get: r => R.badge(r.state) },
    { label: "Step / weight", get: where },
    { label: "Started", get: r => R.time(r.created_at) },
    { label: "Reason", get: r => r.reason || "—", class: "reason" },
  ], data.rollouts, { class: "rollouts" }));
});
