/* One model (/model?name=NAME[&version=V]): its aliases with who moved them when, its
   versions (run, metrics, gates), one version's model card and evaluation, its running
   rollouts and its audit events with the log's verification. With a server started with
   --allow-actions (/api/health lists the actions): promote, rollback and abort buttons,
   each asking for a reason in a confirm dialog and showing the result. */
"use strict";

const EVENTS_PAGE = 20;
const RESULT_KEY = "reprise-model-result";
const HEADLINE = ["accuracy", "f1", "roc_auc", "r2", "rmse", "mae"];

R.page(async (main) => {
  const q = R.params();
  const name = q.get("name");
  if (!name) {
    main.append(R.h("p", {}, "No model given. ", R.h("a", { href: "/models" }, "All models")));
    return;
  }
  const [model, health, check] = await Promise.all([
    R.api("/models/" + encodeURIComponent(name)), R.api("/health"), R.api("/audit/verify")]);
  const can = new Set(health.actions || []);
  const result = R.h("div", { id: "action-result", role: "status" });
  const done = sessionStorage.getItem(RESULT_KEY);  // the action before this page's reload
  if (done) {
    sessionStorage.removeItem(RESULT_KEY);
    result.append(R.h("div", { class: "notice" }, done));
  }
  main.append(R.h("h1", {}, "Model ", R.h("span", { class: "mono" }, model.name)), result);
  main.append(aliasesSection(model, can, result));
  if (model.rollouts.length) main.append(rolloutsSection(model, can, result));
  main.append(versionsSection(model, can, result));
  const chosen = Number(q.get("version")) || pickVersion(model);
  if (chosen) main.append(await versionSection(model.name, chosen));
  const log = R.h("div", {});
  main.append(R.section("Audit log", R.auditStatus(check, "Verification of the whole log: "), log));
  await R.auditLog(log, { model: model.name, size: EVENTS_PAGE, reason: true });
});

/** The version shown by default: the one production holds, else the newest. */
function pickVersion(model) {
  const prod = model.aliases.find(a => a.alias === "production");
  if (prod) return prod.version;
  const vs = model.versions;
  return vs.length ? vs[vs.length - 1].version : null;
}

function versionLink(name, v) {
  return R.h("a", { href: R.link("model", { name, version: v }) }, String(v));
}

function aliasesSection(model, can, result) {
  if (!model.aliases.length) return R.section("Aliases", R.h("p", { class: "muted" }, "No alias yet."));
  const table = R.table([
    { label: "Alias", get: a => R.h("span", { class: "alias" }, a.alias) },
    { label: "Version", get: a => versionLink(model.name, a.version) },
    { label: "Rollback returns to", get: a => a.rollback_to === null ? "—" : versionLink(model.name, a.rollback_to) },
    { label: "", get: a => can.has("rollback") && a.rollback_to !== null
      ? R.h("button", { class: "rollback", onclick: () => act(result, {
        title: "Roll back " + model.name + "@" + a.alias,
        says: model.name + "@" + a.alias + " goes back from version " + a.version + " to " + a.rollback_to + ".",
        path: "/models/" + encodeURIComponent(model.name) + "/rollback",
        body: { alias: a.alias },
        done: r => model.name + "@" + r.alias + " → " + r.to + " (rolled back from " + r.from + ")" }) }, "Rollback")
      : "" },
  ], model.aliases, { class: "aliases", rowAttrs: a => ({ dataset: { alias: a.alias } }) });
  const moves = model.aliases.flatMap(a => a.history.map(m => Object.assign({ alias: a.alias }, m)))
    .sort((x, y) => y.seq - x.seq);
  const history = R.table([
    { label: "When", get: m => R.time(m.time) },
    { label: "Alias", get: m => m.alias },
    { label: "Action", get: m => m.action },
    { label: "From", get: m => m.from },
    { label: "To", get: m => m.to },
    { label: "Who", get: m => m.actor },
    { label: "Reason", class: "wrap", get: m => m.reason || "—" },
  ], moves, { class: "alias-history" });
  return R.section("Aliases", table, R.h("h3", {}, "Who moved them"), history);
}

function rolloutsSection(model, can, result) {
  return R.section("Running rollouts", R.table([
    { label: "Rollout", get: r => r.id },
    { label: "Alias", get: r => r.alias },
    { label: "Stable → candidate", get: r => r.stable + " → " + r.candidate },
    { label: "Candidate weight", get: r => R.fmt(r.weight) + "%" },
    { label: "State", get: r => R.badge(r.state) },
    { label: "", get: r => can.has("abort_rollout")
      ? R.h("button", { class: "abort", onclick: () => act(result, {
        title: "Abort the rollout of " + model.name + "@" + r.alias,
        says: "Version " + r.candidate + " stops taking traffic; " + model.name + "@" + r.alias + " stays at " + r.stable + ".",
        path: "/models/" + encodeURIComponent(model.name) + "/rollouts/abort",
        body: { alias: r.alias },
        done: x => "rollout " + x.id + " " + x.state + "; " + x.name + "@" + x.alias + " stays at " + x.stable }) }, "Abort")
      : "" },
  ], model.rollouts, { class: "rollouts" }));
}

function versionsSection(model, can, result) {
  const keys = HEADLINE.filter(k => model.versions.some(v => k in (v.metrics || {})));
  const cols = [
    { label: "Version", get: v => versionLink(model.name, v.version) },
    { label: "Run", get: v => v.run_id ? R.h("a", { class: "run", href: R.link("run", { id: v.run_id }) }, v.run_id) : "—" },
    { label: "Created", get: v => R.time(v.created) },
    { label: "Status", get: v => v.status },
    { label: "Gates", get: v => gates(v.gates_passed) },
    { label: "Aliases", get: v => v.aliases.join(", ") || "—" },
    ...keys.map(k => ({ label: k, get: v => (v.metrics || {})[k] })),
  ];
  if (can.has("promote")) cols.push({ label: "", get: v => v.status !== "ready" ? "" :
    R.h("button", { class: "promote", onclick: () => promoteDialog(model, v, result) }, "Promote…") });
  return R.section("Versions", R.table(cols, model.versions, {
    class: "versions", rowAttrs: v => ({ dataset: { version: v.version } }) }));
}

function gates(passed) {
  if (passed === true) return R.badge("passed");
  if (passed === false) return R.badge("failed");
  return R.h("span", { class: "muted" }, "none");
}

function promoteDialog(model, v, result) {
  const alias = R.h("input", { type: "text", name: "alias", value: "production", "aria-label": "alias" });
  const force = R.h("input", { type: "checkbox", name: "force" });
  const extra = [R.h("label", {}, "Alias ", alias)];
  if (v.gates_passed !== true) {
    extra.push(R.h("p", {}, R.h("label", {}, force, " Promote although its evaluation gates did not pass")));
  }
  act(result, {
    title: "Promote " + model.name + ":" + v.version,
    says: "The alias will point at version " + v.version + ".",
    extra,
    path: "/models/" + encodeURIComponent(model.name) + "/promote",
    body: () => ({ version: v.version, alias: alias.value.trim(), force: force.checked }),
    done: r => model.name + "@" + r.alias + " → " + r.version +
      (r.changed ? (r.previous === null ? " (new alias)" : " (was " + r.previous + ")") : " (already there; nothing changed)"),
  });
}

/** The confirm dialog of an action: what it does, a reason (required); on confirm the
    POST, then the result above the page and the page drawn again. */
function act(result, spec) {
  const reason = R.h("textarea", { name: "reason", "aria-required": "true", placeholder: "Why (recorded in the audit log)", "aria-label": "reason" });
  const error = R.h("div", {});
  const confirm = R.h("button", { type: "submit", class: "primary confirm" }, "Confirm");
  const cancel = R.h("button", { type: "button", class: "cancel" }, "Cancel");
  const form = R.h("form", { method: "dialog" }, R.h("h2", {}, spec.title), R.h("p", {}, spec.says),
    spec.extra || [], R.h("label", {}, "Reason", reason), error,
    R.h("div", { class: "buttons" }, cancel, confirm));
  const dialog = R.h("dialog", { class: "action" }, form);
  cancel.addEventListener("click", () => { dialog.close(); dialog.remove(); });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!reason.value.trim()) { error.replaceChildren(R.h("div", { class: "error" }, "A reason is required.")); return; }
    confirm.disabled = true;
    const body = Object.assign(typeof spec.body === "function" ? spec.body() : spec.body, { reason: reason.value });
    try {
      const r = await R.api(spec.path, { method: "POST", json: body });
      dialog.close();
      dialog.remove();
      sessionStorage.setItem(RESULT_KEY, spec.done(r));
      location.reload();
    } catch (err) {
      confirm.disabled = false;
      error.replaceChildren(R.h("div", { class: "error", role: "alert" }, String(err.message || err)));
    }
  });
  document.body.append(dialog);
  dialog.showModal();
}

async function versionSection(name, version) {
  const v = await R.api("/models/" + encodeURIComponent(name) + "/versions/" + version);
  const card = v.card || {};
  const parts = [R.kv({
    run: v.run_id ? R.h("a", { href: R.link("run", { id: v.run_id }) }, v.run_id) : "—",
    status: v.status, aliases: v.aliases.join(", ") || "—", task: card.task || v.task,
    description: card.description, classes: card.classes ? card.classes.join(", ") : undefined,
    "gates passed": gates(v.gates_passed), package: R.h("span", { class: "mono" }, v.package),
  })];
  const metrics = Object.entries(card.metrics || {});
  if (metrics.length) {
    parts.push(R.h("h3", {}, "Metrics (with intervals)"), R.table([
      { label: "Metric", get: ([k]) => k },
      { label: "Value", get: ([, m]) => m.value },
      { label: "Interval", get: ([, m]) => m.ci_low === undefined ? "—" : "[" + R.fmt(m.ci_low) + ", " + R.fmt(m.ci_high) + "]" },
      { label: "Method", get: ([, m]) => m.ci_method || "—" },
    ], metrics, { class: "card-metrics" }));
  }
  const results = ((card.gates || {}).results) || [];
  if (results.length) {
    parts.push(R.h("h3", {}, "Evaluation gates"), R.table([
      { label: "Metric", get: g => g.metric },
      { label: "Rule", get: g => g.rule },
      { label: "Actual", get: g => g.actual },
      { label: "Result", get: g => R.badge(g.passed ? "passed" : "failed") },
    ], results, { class: "gates" }));
  }
  const worst = Object.entries(card.worst_slice || {});
  if (worst.length) {
    parts.push(R.h("h3", {}, "Worst slice"), R.table([
      { label: "Metric", get: ([k]) => k },
      { label: "Segment", get: ([, s]) => s.segment },
      { label: "Rows", get: ([, s]) => s.n },
      { label: "Value", get: ([, s]) => s.value },
    ], worst, { class: "worst" }));
  }
  if (v.evaluation) parts.push(evaluationPart(v.evaluation), reportPart(name, version));
  else parts.push(R.h("p", { class: "muted" }, "Packaged without an evaluation."));
  return R.section("Version " + version + ": model card", ...parts);
}

function evaluationPart(ev) {
  const out = [R.h("h3", {}, "Evaluation"), R.kv({ rows: ev.n, task: ev.task, "positive label": ev.positive_label })];
  const cm = ev.confusion_matrix;
  if (cm && cm.labels) {
    out.push(R.h("h3", {}, "Confusion matrix (rows: true, columns: predicted)"), R.table(
      [{ label: "", get: r => r.label }, ...cm.labels.map((l, i) => ({ label: String(l), get: r => r.row[i] }))],
      cm.labels.map((l, i) => ({ label: String(l), row: cm.matrix[i] })), { class: "confusion" }));
  }
  const per = Object.entries(ev.per_class || {});
  if (per.length) {
    out.push(R.h("h3", {}, "Per class"), R.table([
      { label: "Class", get: ([c]) => c },
      { label: "Precision", get: ([, m]) => m.precision },
      { label: "Recall", get: ([, m]) => m.recall },
      { label: "F1", get: ([, m]) => m.f1 },
      { label: "Support", get: ([, m]) => m.support },
    ], per, { class: "per-class" }));
  }
  return R.h("div", {}, out);
}

/** The evaluation report (HTML with its charts) on demand, in a sandboxed iframe: its
    scripts run in an opaque origin, away from this page and the API. An iframe cannot send
    the API's bearer token, so with a token the report comes from the CLI instead. */
function reportPart(name, version) {
  const box = R.h("div", { class: "report" });
  if (sessionStorage.getItem("reprise-ui-token")) {
    box.append(R.h("p", { class: "muted" }, "The full report: ",
      R.h("code", {}, "reprise models show " + name + ":" + version + " --report report.html")));
    return box;
  }
  const show = R.h("button", { class: "show-report", onclick: () => {
    show.remove();
    box.append(R.h("iframe", { class: "report", title: "Evaluation report", sandbox: "allow-scripts",
      src: "/api/models/" + encodeURIComponent(name) + "/versions/" + version + "/report" }));
  } }, "Show the evaluation report");
  box.append(show);
  return box;
}


