/* Monitoring: a served model version's live windows as reprise.monitor stored them: the
   drift of each column over time, each window's verdicts, the alarms, and what the
   closed loop did about them (the monitor.* audit events). ?model=NAME&version=V */
"use strict";

R.page(async (main) => {
  const q = R.params();
  const args = new URLSearchParams();
  for (const k of ["model", "version"]) if (q.get(k)) args.set(k, q.get(k));
  const d = await R.api("/monitoring" + (args.toString() ? "?" + args : ""));
  main.append(R.h("h1", {}, "Monitoring"));
  if (!d.windows.length && !d.events.length) {
    const what = d.model ? `${d.model}${d.version ? ":" + d.version : ""}` : "this workspace";
    main.append(R.h("div", { class: "card empty" },
      R.h("p", {}, `No monitoring data for ${what}: no live window has been judged yet.`),
      R.h("p", { class: "muted" }, "Windows are stored by ", R.h("code", {}, "reprise monitor NAME@ALIAS"),
        " (live drift of a served model's request log) and by the closed loop, ",
        R.h("code", {}, "reprise monitor watch"), ".")));
    return;
  }

  if (d.monitored.length > 1) {
    main.append(R.h("div", { class: "toolbar" }, "Model version:",
      d.monitored.map(m => R.h("a", { href: R.link("monitoring", { model: m.model, version: m.version }),
        class: m.model === d.model && m.version === d.version ? "active" : "" }, `${m.model}:${m.version}`))));
  }
  const ref = d.reference || {};
  const last = d.windows[d.windows.length - 1];
  main.append(R.h("div", { class: "card" }, R.kv({
    "Model version": `${d.model}:${d.version}`,
    "Reference": ref.dataset ? `${ref.dataset} (${R.fmt(ref.reference_rows)} rows; predictions: ${ref.predictions})` : "—",
    "Windows": `${d.windows.length} (the newest ended ${R.time(last && last.end)})`,
    "Alarms": d.alarms.length,
  })));

  // drift per column over time
  const part = R.h("select", { "aria-label": "inputs or predictions" },
    R.h("option", { value: "input" }, "inputs"), R.h("option", { value: "prediction" }, "predictions"));
  const measure = R.h("select", { "aria-label": "measure" },
    R.h("option", { value: "js" }, "Jensen-Shannon distance (0..1)"),
    R.h("option", { value: "statistic" }, "test statistic"),
    R.h("option", { value: "p_adjusted" }, "p-value (corrected)"));
  const chart = R.h("div", { class: "chart", id: "drift" });
  function drawDrift() {
    const cols = d.drift[part.value] || {};
    const names = Object.keys(cols);
    const traces = names.map(n => {
      const c = cols[n];
      return { x: c.time.map(t => new Date(t * 1000)), y: c[measure.value], name: n,
               type: "scatter", mode: "lines+markers",
               marker: { symbol: c.verdict.map(v => v === "drift" ? "x" : "circle"),
                         size: c.verdict.map(v => v === "drift" ? 12 : 6) },
               text: c.verdict.map((v, i) => `${n}: ${v} (${c.method[i]})`), hoverinfo: "x+y+text" };
    });
    const layout = { xaxis: { title: { text: "window end (UTC)" } }, yaxis: { title: { text: measure.selectedOptions[0].text } },
                     showlegend: names.length <= 12 };
    if (measure.value === "p_adjusted") layout.yaxis.type = "log";
    if (!names.length) layout.annotations = [{ text: "no columns", showarrow: false }];
    R.chart(chart, traces, layout);
  }
  part.addEventListener("change", drawDrift);
  measure.addEventListener("change", drawDrift);
  main.append(R.section("Drift per column", R.h("div", { class: "toolbar" }, part, measure), chart,
    R.h("p", { class: "muted" }, "one point per window, at its end; ✕: the column drifted in that window")));
  drawDrift();

  main.append(R.section("Windows", R.table([
    { label: "Start", get: w => R.time(w.start) },
    { label: "End", get: w => R.time(w.end) },
    { label: "Rows", get: w => w.rows },
    { label: "Labelled", get: w => w.labelled },
    { label: "Inputs", get: w => R.badge(w.verdicts.input_drift) },
    { label: "Predictions", get: w => R.badge(w.verdicts.prediction_drift) },
    { label: "Performance", get: w => R.badge(w.verdicts.performance) },
    { label: "Drifted", get: w => [...w.drifted.input, ...w.drifted.prediction].join(", ") || "—", class: "reason" },
  ], [...d.windows].reverse(), { class: "windows" })));

  main.append(R.section(`Alarms (${d.alarms.length})`, d.alarms.length ? R.table([
    { label: "Alarm", get: a => R.h("span", { class: "mono" }, a.id) },
    { label: "Kind", get: a => a.kind },
    { label: "Raised", get: a => R.time(a.raised_at) },
    { label: "Message", get: a => a.message, class: "reason" },
  ], d.alarms, { class: "alarms" }) : R.h("p", { class: "muted" }, "no alarm")));

  const outcome = e => e.action.replace(/^monitor\./, "").replace(/^action\./, "");
  main.append(R.section(`Actions of the closed loop (${d.events.length})`, d.events.length ? R.table([
    { label: "#", get: e => e.seq },
    { label: "Time", get: e => R.time(e.time) },
    { label: "On", get: e => e.subject },
    { label: "Event", get: e => R.badge(outcome(e)) },
    { label: "Action", get: e => e.do || "—" },
    { label: "Alarm", get: e => e.alarm ? R.h("span", { class: "mono" }, e.alarm) : "—" },
    { label: "Detail", get: e => e.message || e.error || e.reason || (e.result ? R.fmt(e.result) : "—"), class: "reason" },
    { label: "By", get: e => e.actor },
  ], d.events, { class: "events" }) : R.h("p", { class: "muted" },
    "no alarm was acted on (the closed loop, reprise monitor watch, records its actions here)")));
});
