/* One rollout (/rollout?id=...): the candidate's weight at each decision, each version's
   metrics in the current window, the checks as they stand, and every decision with the
   checks it was taken on. Polled every few seconds while the rollout runs. */
"use strict";

R.page(async (main) => {
  const id = R.params().get("id");
  if (!id) throw new Error("no rollout given: open a rollout from the Rollouts page");
  const POLL_MS = 3000;

  const pct = v => (v === null || v === undefined) ? "—" : (v * 100).toFixed(2) + "%";
  const ms = v => (v === null || v === undefined) ? "—" : R.fmt(v, 3) + " ms";
  const verdict = c => R.badge(c.verdict);

  function checksTable(checks) {
    if (!checks.length) return R.h("p", { class: "muted" }, "no checks");
    return R.table([
      { label: "Check", get: c => c.name },
      { label: "Verdict", get: verdict },
      { label: "Value", get: c => c.value },
      { label: "Limit", get: c => c.limit },
      { label: "Detail", get: c => c.message, class: "reason" },
    ], checks, { class: "checks" });
  }

  function draw(d) {
    const r = d.rollout;
    // a version links to the run that produced it, when there is one
    const version = (v, role) => {
      const text = `v${v} (${role})`;
      return d.runs[role] ? R.h("a", { href: R.link("run", { id: d.runs[role] }), class: "version-run" }, text) : text;
    };
    const where = r.strategy === "canary"
      ? `step ${r.step + 1} of ${r.steps.length} (weights ${r.steps.join(", ")} %)`
      : `phase ${r.phase}`;
    const head = R.h("div", { class: "card" }, R.kv({
      "Model": r.ref,
      "Versions": R.h("span", {}, version(r.stable, "stable"), " → ", version(r.candidate, "candidate")),
      "Strategy": r.strategy, "State": R.badge(r.state), "Progress": where,
      "Candidate weight": R.fmt(r.weight) + "%",
      "Started": R.time(r.created_at), "Ended": R.time(r.ended_at),
      "Next decision": d.next_decision_in === null ? "—" : `in ${d.next_decision_in.toFixed(0)} s`,
      "Started by": r.actor, "Reason": r.reason || "—",
    }));

    const chart = R.h("div", { class: "chart", id: "weights" });
    const versions = ["stable", "candidate"].map(role => Object.assign({ role }, d.versions[role]));
    const metrics = R.table([
      { label: "Version", get: v => "v" + v.version },
      { label: "Role", get: v => v.role },
      { label: "Weight", get: v => R.fmt(d.weights[v.role]) + "%" },
      { label: "Requests", get: v => v.requests },
      { label: "Errors", get: v => v.errors },
      { label: "Error rate", get: v => pct(v.error_rate) },
      { label: "p50", get: v => ms(v.p50_ms) },
      { label: "p99", get: v => ms(v.p99_ms) },
      { label: "Prediction shift", get: v => v.role === "stable" ? "(reference)" : v.prediction_shift },
    ], versions, { class: "versions" });
    const windowNote = R.h("p", { class: "muted" },
      `window: candidate since ${R.time(d.window.since_candidate)}, stable since ` +
      `${R.time(d.window.since_stable)}, until ${R.time(d.window.until)}; prediction shift: ` +
      "Jensen-Shannon distance of the candidate's outputs to the stable version's");

    const checksNote = r.running ? `as they stand now (${R.time(d.checks_at)})`
      : (d.checks_at ? `of the last decision (${R.time(d.checks_at)})` : "");
    const decisions = d.decisions.map(e => R.h("div", { class: "card decision" },
      R.h("h3", {}, `#${e.seq} ${e.action.replace(/^rollout\./, "")}`,
        e.weight === null ? "" : ` → ${R.fmt(e.weight)}%`),
      R.h("p", {}, R.time(e.time), " · by ", e.actor, e.force ? " · forced" : ""),
      R.h("p", { class: "reason" }, e.reason || "—"),
      e.checks.length ? checksTable(e.checks) : null,
      e.skipped.length ? R.h("p", { class: "muted" }, "skipped: " + e.skipped.join(", ")) : null));

    main.replaceChildren(
      R.h("h1", {}, "Rollout ", R.h("span", { class: "mono" }, r.id)), head,
      R.section("Candidate weight by decision", chart),
      R.section("Current window", metrics, windowNote),
      R.section("Checks " + checksNote, checksTable(d.checks)),
      R.section(`Decisions (${d.decisions.length})`, R.h("div", { class: "decisions" }, decisions)));

    const p = d.progress;
    R.chart(chart, [{
      x: p.map(e => new Date(e.time * 1000)), y: p.map(e => e.weight),
      text: p.map(e => e.action.replace(/^rollout\./, "")), type: "scatter",
      mode: "lines+markers+text", textposition: "top center", line: { shape: "hv" },
      name: "candidate v" + r.candidate + " weight",
    }], { yaxis: { title: { text: "weight (%)" }, range: [-5, 110] }, xaxis: { title: { text: "decision time (UTC)" } },
          showlegend: false });
  }

  let timer = null;
  async function load() {
    const d = await R.api("/rollouts/" + encodeURIComponent(id));
    draw(d);
    if (d.rollout.running) timer = setTimeout(() => load().catch(e => R.showError(main, e)), POLL_MS);
  }
  await load();
  window.addEventListener("beforeunload", () => clearTimeout(timer));
});
