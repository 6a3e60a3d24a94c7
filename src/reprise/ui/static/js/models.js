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
  main.append(R.section("Audit log", R.auditStatus(check), log));
  await R.auditLog(log, { size: AUDIT_PAGE, subject: e => R.h("a", {
    href: R.link("model", { name: e.subject.split(/[@:]/)[0] }) }, e.subject) });
});


const AUDIT_PAGE = 25;

