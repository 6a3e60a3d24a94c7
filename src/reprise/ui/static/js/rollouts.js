/* Rollouts: every rollout of every model, newest first, from /api/rollouts; ?model=NAME
   and ?state=running|promoted|rolled_back|aborted narrow the list. */
"use strict";

R.page(async (main) => {
  const q = R.params();
  const args = new URLSearchParams();
  for (const k of ["model", "state"]) if (q.get(k)) args.set(k, q.get(k));
  main.append(R.h("h1", {}, "Rollouts"));
  const states = ["", "running", "promoted", "rolled_back", "aborted"];
  const pick = R.h("select", { "aria-label": "state", onchange: e => {
    const next = Object.fromEntries(q.entries());
    if (e.target.value) next.state = e.target.value; else delete next.state;
    location.href = R.link("rollouts", next);
  } }, states.map(s => R.h("option", { value: s, selected: s === (q.get("state") || "") }, s || "every state")));
  main.append(R.h("div", { class: "toolbar" }, "State:", pick,
    q.get("model") ? R.h("span", {}, "model ", R.h("code", {}, q.get("model")), " ",
      R.h("a", { href: R.link("rollouts", { state: q.get("state") }) }, "(every model)")) : null));
  const data = await R.api("/rollouts" + (args.toString() ? "?" + args : ""));
  if (!data.rollouts.length) {
    main.append(args.toString() ? R.h("p", { class: "muted empty" }, "No rollout matches.")
      : R.h("p", { class: "muted empty" }, "No rollouts yet. Start one with ",
        R.h("code", {}, "reprise rollout start NAME VERSION"), "."));
    return;
  }
  const where = r => r.strategy === "canary"
    ? `step ${r.step + 1}/${r.steps.length} · ${R.fmt(r.weight)}%`
    : `${r.phase} · ${R.fmt(r.weight)}%`;
  main.append(R.table([
    { label: "Rollout", get: r => R.h("a", { href: R.link("rollout", { id: r.id }) }, r.id) },
    { label: "Model", get: r => R.h("a", { href: R.link("rollouts", { model: r.name }) }, r.ref) },
    { label: "Candidate", get: r => "v" + r.candidate },
    { label: "Stable", get: r => "v" + r.stable },
    { label: "Strategy", get: r => r.strategy },
    { label: "State", get: r => R.badge(r.state) },
    { label: "Step / weight", get: where },
    { label: "Started", get: r => R.time(r.created_at) },
    { label: "Reason", get: r => r.reason || "—", class: "reason" },
  ], data.rollouts, { class: "rollouts" }));
});
