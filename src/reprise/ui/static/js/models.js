/* Models: the registered models (versions, newest, aliases) from /api/models, whether the
   audit log is intact (/api/audit/verify) and the audit log, newest first, a page at a
   time (/api/audit). */
"use strict";

R.page(async (main) => {
  main.append(R.h("h1", {}, "Models"));
  const [data, check] = await Promise.all([R.api("/models"), R.api("/audit/verify")]);
  if (!data.models.length) {
    main.append(R.h("p", { class: "muted" }, "No registered model yet: ",
      R.h("code", {}, "reprise models register NAME --run RUN"), "."));
  } else {
    main.append(R.section("Registered models", R.table([
      { label: "Model", get: m => R.h("a", { href: R.link("model", { name: m.name }) }, m.name) },
      { label: "Versions", get: m => m.versions },
      { label: "Newest", get: m => m.latest },
      { label: "Aliases", get: m => Object.entries(m.aliases).map(([a, v]) => a + " → " + v).join(", ") || "—" },
      { label: "Updated", get: m => R.time(m.updated) },
    ], data.models, { class: "models" })));
  }
  const log = R.h("div", {});
  main.append(R.section("Audit log", auditStatus(check), log));
  await auditPage(log, 0);
});

/** The audit log's verification: "intact" with a badge, or each problem found. */
function auditStatus(check) {
  const line = R.h("p", { class: "audit-status" }, "Verification: ", R.badge(check.status), " ",
    check.events + " event(s); head ", R.h("code", {}, check.head.slice(0, 16)));
  if (check.ok) return line;
  return R.h("div", {}, line, R.h("ul", { class: "problems" },
    check.problems.map(p => R.h("li", {}, p.kind + ": " + p.message))));
}

const AUDIT_PAGE = 25;

async function auditPage(box, offset) {
  const page = await R.api("/audit?limit=" + AUDIT_PAGE + "&offset=" + offset);
  const prev = R.h("button", { disabled: offset === 0,
    onclick: () => auditPage(box, Math.max(0, offset - AUDIT_PAGE)) }, "Newer");
  const next = R.h("button", { disabled: offset + AUDIT_PAGE >= page.total,
    onclick: () => auditPage(box, offset + AUDIT_PAGE) }, "Older");
  const shown = page.total ? (offset + 1) + "–" + (offset + page.events.length) + " of " + page.total : "no events";
  box.replaceChildren(
    R.h("div", { class: "toolbar" }, prev, next, R.h("span", { class: "muted" }, shown)),
    R.table([
      { label: "#", get: e => e.seq },
      { label: "Time", get: e => R.time(e.time) },
      { label: "Actor", get: e => e.actor },
      { label: "Action", get: e => e.action },
      { label: "Subject", get: e => R.h("a", { href: R.link("model", { name: e.subject.split(/[@:]/)[0] }) }, e.subject) },
      { label: "Details", class: "wrap mono", get: e => JSON.stringify(e.payload) },
    ], page.events, { class: "audit" }));
}
