/* Run: one run at /run?id=RUN_ID: its summary and links (lineage, parent, children, the
   model versions it produced), its error, params, final metrics, a chart per metric
   (zoom re-fetches the visible range at full resolution; log scale; EMA smoothing; x =
   step or time), system metrics and energy, pipeline steps, artifacts with previews, its
   environment and its code snapshot. */
"use strict";

(() => {
  const h = R.h;
  const MAX_CHARTS = 40;
  const LIVE_S = 2;  // how often a running run's page follows it
  const MAX_INLINE = 32 * 2 ** 20;  // images and HTML reports shown in the page up to this size
  const enc = encodeURIComponent;
  const keyPath = (key) => key.split("/").map(enc).join("/");

  function bytes(n) {
    if (n === null || n === undefined) return "—";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }

  function runLink(id, label) {
    return h("a", { href: R.link("run", { id }), class: "mono" }, label || id);
  }

  /** A filter box over the rows of a table built by make(rows). */
  function filtered(rows, text, make, placeholder, cls) {
    const holder = h("div", { class: cls || "" });
    const count = h("span", { class: "muted" });
    const input = h("input", { type: "search", placeholder, "aria-label": placeholder,
                               class: "filter" });
    const draw = () => {
      const q = input.value.trim().toLowerCase();
      const shown = q ? rows.filter(r => text(r).toLowerCase().includes(q)) : rows;
      count.textContent = ` ${shown.length} of ${rows.length}`;
      holder.replaceChildren(make(shown));
    };
    input.addEventListener("input", draw);
    draw();
    return h("div", {}, h("div", { class: "toolbar" }, input, count), holder);
  }

  // -- summary --------------------------------------------------------------------------

  function header(run, models) {
    const links = [h("a", { href: R.link("lineage", { ref: run.id }), class: "lineage" },
                     "Lineage")];
    if (run.parent_id) {
      links.push(h("span", {}, " · parent ", h("a", { href: R.link("run", { id: run.parent_id }),
                                                      class: "mono parent" }, run.parent_id)));
    }
    for (const m of models) {
      links.push(h("span", {}, " · model ",
        h("a", { href: R.link("model", { name: m.name, version: m.version }),
                 class: "model-link" }, `${m.name}:${m.version}`),
        m.aliases.length ? " (" + m.aliases.join(", ") + ")" : ""));
    }
    return h("div", { class: "run-head" },
      h("h1", {}, "Run ", h("span", { class: "run-name" }, run.name), " ", R.badge(run.status)),
      h("p", { class: "muted" }, h("span", { class: "mono run-id" }, run.id), " · ", ...links));
  }

  function summary(run) {
    const git = run.git_commit ? run.git_commit.slice(0, 12) + (run.git_dirty ? " (dirty)" : "")
      : null;
    const fields = {
      kind: run.kind, started: R.time(run.started_at), ended: R.time(run.ended_at),
      duration: R.duration(run.duration), host: run.host, user: run.user, seed: run.seed,
      git, pipeline: (run.tags || {})["reprise.pipeline"],
    };
    if (run.children && run.children.length) {
      fields.children = h("span", {}, run.children.map((c, i) =>
        [i ? ", " : "", runLink(c)]));
    }
    for (const k of Object.keys(fields)) if (fields[k] === null || fields[k] === undefined) delete fields[k];
    const tags = Object.fromEntries(Object.entries(run.tags || {})
      .filter(([k]) => !k.startsWith("reprise.")));
    const parts = [R.kv(fields)];
    if (Object.keys(tags).length) parts.push(h("h3", {}, "Tags"), R.kv(tags));
    return R.section("Summary", ...parts);
  }

  function flatParams(params, prefix = "", out = {}) {
    for (const [k, v] of Object.entries(params || {})) {
      if (v && typeof v === "object" && !Array.isArray(v) && !("$input" in v)) flatParams(v, prefix + k + ".", out);
      else if (v && typeof v === "object" && "$input" in v) out[prefix + k] = v.resolved || v.$input;
      else out[prefix + k] = v;
    }
    return out;
  }

  function finalMetrics(run) {
    const rows = Object.entries(run.metrics || {}).map(([key, value]) =>
      ({ key, value, step: (run.metric_steps || {})[key] }));
    if (!rows.length) return R.section("Final metrics", h("p", { class: "muted" }, "none"));
    return R.section("Final metrics", filtered(rows, r => r.key, shown => R.table([
      { label: "Metric", get: r => r.key, class: "mono" },
      { label: "Value", get: r => r.value },
      { label: "Step", get: r => r.step },
    ], shown, { class: "metrics" }), "filter metrics", "scroll"));
  }

  // -- charts ---------------------------------------------------------------------------

  function ema(ys, alpha) {
    if (!alpha) return ys;
    const out = [];
    let s = 0, n = 0;
    for (const y of ys) {
      if (y === null) { out.push(null); continue; }
      s = alpha * s + (1 - alpha) * y;
      n += 1;
      out.push(s / (1 - Math.pow(alpha, n)));  // debiased, as TensorBoard does
    }
    return out;
  }

  /** One chart per key, sharing the controls (x, log scale, smoothing). */
  function chartsSection(title, run, keys, cls) {
    const state = { x: "step", log: false, smooth: 0 };
    const charts = [];
    const grid = h("div", { class: "charts " + cls });
    const xSel = h("select", { "aria-label": "x axis", class: "x-axis" },
      h("option", { value: "step" }, "x = step"), h("option", { value: "time" }, "x = time (s)"));
    const logBox = h("input", { type: "checkbox", class: "log-scale" });
    const smooth = h("input", { type: "range", min: "0", max: "0.99", step: "0.01", value: "0",
                                class: "smoothing", "aria-label": "smoothing" });
    const smoothLabel = h("span", { class: "muted" }, "0");
    xSel.addEventListener("change", () => {
      state.x = xSel.value;
      charts.forEach(c => c.load(null, null));
    });
    logBox.addEventListener("change", () => {
      state.log = logBox.checked;
      charts.forEach(c => c.draw());
    });
    smooth.addEventListener("input", () => {
      state.smooth = Number(smooth.value);
      smoothLabel.textContent = smooth.value;
      charts.forEach(c => c.draw());
    });
    const shown = keys.slice(0, MAX_CHARTS);
    for (const k of shown) {
      const c = metricChart(run, k.key, state);
      charts.push(c);
      grid.append(c.el);
    }
    const more = keys.length > shown.length
      ? h("p", { class: "muted" }, `${keys.length - shown.length} more series not drawn`) : null;
    const tools = h("div", { class: "toolbar" }, xSel,
      h("label", {}, logBox, " log scale"), h("label", {}, "smoothing ", smooth), smoothLabel);
    const sec = R.section(title, tools, grid, more);
    sec.start = () => Promise.all(charts.map(c => c.load(null, null)));
    // a live run's series grow: re-fetch those the user has not zoomed into
    sec.refresh = () => Promise.all(charts.filter(c => !c.zoomed()).map(c => c.load(null, null)));
    return sec;
  }

  function metricChart(run, key, state) {
    const plot = h("div", { class: "chart-plot" });
    const info = h("span", { class: "muted chart-info" });
    const el = h("div", { class: "metric-chart", dataset: { key } },
      h("div", { class: "chart-title" }, h("span", { class: "mono" }, key), " ", info), plot);
    let data = null, drawn = false, busy = false;
    const t0 = run.started_at || 0;

    async function load(start, end) {
      const q = new URLSearchParams({ x: state.x, max_points: "1000" });
      if (start !== null) q.set("start", state.x === "time" ? t0 + start : start);
      if (end !== null) q.set("end", state.x === "time" ? t0 + end : end);
      const got = await R.api(`/runs/${enc(run.id)}/metrics/${keyPath(key)}?${q}`);
      data = { xs: state.x === "time" ? got.xs.map(t => t - t0) : got.xs, ys: got.ys,
               range: start === null ? null : [start, end] };
      info.textContent = `${got.in_range} of ${got.total_points} points` +
        (got.downsampled ? ", downsampled" : "") + (got.non_finite ? `, ${got.non_finite} not finite` : "");
      draw();
    }

    function draw() {
      if (!data) return;
      const traces = [];
      const smoothing = state.smooth > 0;
      traces.push({ x: data.xs, y: data.ys, mode: "lines", type: "scatter", name: key,
                    line: { width: 1.5, color: "#1f77b4" }, opacity: smoothing ? 0.3 : 1,
                    showlegend: false });
      if (smoothing) {
        traces.push({ x: data.xs, y: ema(data.ys, state.smooth), mode: "lines", type: "scatter",
                      name: key + " (smoothed)", line: { width: 2, color: "#1f77b4" },
                      showlegend: false });
      }
      const layout = {
        height: 260, margin: { l: 55, r: 15, t: 10, b: 40 },
        xaxis: { title: { text: state.x === "time" ? "seconds since start" : "step" } },
        yaxis: { type: state.log ? "log" : "linear" },
      };
      if (data.range) layout.xaxis.range = data.range;
      busy = true;
      const done = drawn ? Plotly.react(plot, traces, Object.assign({
        font: { family: "system-ui, sans-serif", size: 12 }, hovermode: "closest" }, layout))
        : R.chart(plot, traces, layout);
      Promise.resolve(done).then(() => {
        busy = false;
        if (!drawn) {
          drawn = true;
          plot.on("plotly_relayout", onZoom);
        }
      });
    }

    function onZoom(ev) {
      if (busy || !ev) return;
      if (ev["xaxis.autorange"]) { load(null, null).catch(showErr); return; }
      const a = ev["xaxis.range[0]"], b = ev["xaxis.range[1]"];
      if (a === undefined || b === undefined) return;
      load(Number(a), Number(b)).catch(showErr);  // the visible range at full resolution
    }

    function showErr(err) { info.textContent = String(err && err.message || err); }

    return { el, load: (a, b) => load(a, b).catch(showErr), draw,
             zoomed: () => Boolean(data && data.range) };
  }

  // -- system metrics and energy ---------------------------------------------------------

  function energy(run, steps, once) {
    const fields = {};
    if (run.energy_joules !== null && run.energy_joules !== undefined) {
      fields.energy = `${R.fmt(run.energy_joules)} J` + (run.energy_source ? ` (${run.energy_source})` : "");
    }
    for (const k of once) fields[k.key] = k.last;
    const stepEnergy = steps.filter(s => s.energy_joules !== null && s.energy_joules !== undefined);
    const parts = [];
    if (Object.keys(fields).length) parts.push(R.kv(fields));
    if (stepEnergy.length) {
      parts.push(h("h3", {}, "Energy by step"), R.table([
        { label: "Step", get: s => s.step_name },
        { label: "Energy (J)", get: s => s.energy_joules },
        { label: "Duration", get: s => R.duration(s.duration) },
      ], stepEnergy, { class: "step-energy" }));
    }
    return parts;
  }

  // -- steps ----------------------------------------------------------------------------

  function stepsSection(run, steps) {
    if (!steps.length) return null;
    return R.section("Steps", R.table([
      { label: "Step", get: s => h("span", { class: "mono" }, s.step_name) },
      { label: "Status", get: s => R.badge(s.status) },
      { label: "Started", get: s => R.time(s.started_at) },
      { label: "Duration", get: s => R.duration(s.duration) },
      { label: "Energy (J)", get: s => s.energy_joules },
      { label: "Outputs", get: s => (s.outputs || []).length },
      { label: "Run", get: s => {
        // a cached step's outputs were made by the step run `reused_from`, in this run
        const from = (s.details || {}).original_run;
        if (s.status === "cached" && from && from !== run.id) {
          return h("span", {}, "cached from ", runLink(from));
        }
        return s.status === "cached" ? "cached" : runLink(s.run_id || run.id, "this run");
      } },
      { label: "Error", get: s => s.error ? h("pre", { class: "step-error" }, s.error) : "" },
    ], steps, { class: "steps" }));
  }

  // -- artifacts ------------------------------------------------------------------------

  function artifactsSection(run, arts) {
    const view = h("div", { class: "artifact-preview" });
    const url = (what, name, extra) => `/runs/${enc(run.id)}/artifact/${what}?` +
      new URLSearchParams(Object.assign({ name }, extra || {}));
    let objectUrl = null;

    async function preview(a) {
      if (objectUrl) { URL.revokeObjectURL(objectUrl); objectUrl = null; }
      view.replaceChildren(h("p", { class: "muted" }, "Loading " + a.name + "…"));
      const title = h("h3", {}, a.name);
      let body;
      if ((a.preview === "image" || a.preview === "html") && a.size > MAX_INLINE) {
        body = h("p", { class: "muted" }, `${bytes(a.size)}: too big to show here; download it.`);
      } else if (a.preview === "image") {
        const blob = await (await R.raw(url("download", a.name))).blob();
        objectUrl = URL.createObjectURL(blob);
        body = h("img", { src: objectUrl, alt: a.name, class: "artifact-image" });
      } else if (a.preview === "html") {
        const text = await (await R.raw(url("download", a.name))).text();
        // a sandbox without allow-scripts: the report's scripts never run, and it cannot
        // reach this page or the API
        const frame = h("iframe", { sandbox: "", referrerpolicy: "no-referrer",
                                    class: "artifact-html", title: a.name });
        frame.srcdoc = text;
        body = frame;
      } else {
        const p = await R.api(url("preview", a.name));
        if (p.table) {
          const cols = p.table.columns.map(c => ({ label: c, get: r => r[c] }));
          body = h("div", {}, h("p", { class: "muted" }, `first ${p.table.rows.length} rows` +
            (p.table.total_rows !== null ? ` of ${p.table.total_rows.toLocaleString("en-US")}` : "")),
            h("div", { class: "scroll" }, R.table(cols, p.table.rows, { class: "artifact-table" })));
        } else if (p.text !== undefined) {
          body = h("div", {}, h("pre", { class: "artifact-text" }, p.text),
            p.truncated ? h("p", { class: "muted" }, "(first bytes only)") : null);
        } else if (p.files) {
          body = h("div", {}, p.files.map(f => h("details", {},
            h("summary", { class: "mono" }, f.path, " ", h("span", { class: "muted" }, bytes(f.size))),
            f.text === null ? h("p", { class: "muted" }, "(binary)") : h("pre", {}, f.text))));
        } else {
          body = R.kv(Object.assign({ kind: a.kind, materializer: a.materializer }, a.meta || {}));
        }
      }
      view.replaceChildren(title, body);
    }

    const fail = (err) => view.replaceChildren(
      h("div", { class: "error", role: "alert" }, String(err && err.message || err)));
    const show = (a) => preview(a).catch(fail);
    const table = filtered(arts, a => a.name + " " + a.kind, shown => R.table([
      { label: "Name", get: a => h("button", { class: "link artifact-name", type: "button",
                                                onclick: () => show(a) }, a.name) },
      { label: "From", get: a => a.step ? "step " + a.step : "run" },
      { label: "Kind", get: a => a.kind },
      { label: "Type", get: a => a.media_type },
      { label: "Size", get: a => bytes(a.size) },
      { label: "Hash", get: a => h("span", { class: "mono", title: a.hash }, a.hash.slice(0, 12)) },
      { label: "", get: a => h("button", { type: "button", class: "download",
        onclick: () => R.download(url("download", a.name),
                                  a.name.split("/").pop()).catch(fail) }, "Download") },
    ], shown, { class: "artifacts" }), "filter artifacts");
    return R.section("Artifacts", table, view);
  }

  // -- environment and code ---------------------------------------------------------------

  function environmentSection(env) {
    const fields = {};
    if (env.python) fields.python = `${env.python.version} (${env.python.implementation || ""})`;
    if (env.os) fields.os = [env.os.system, env.os.release, env.os.machine, env.os.libc]
      .filter(Boolean).join(" ");
    if (env.cpu) fields.cpu = `${env.cpu.model || "?"}, ${env.cpu.count} cores` +
      (env.cpu.affinity ? ` (${env.cpu.affinity} usable)` : "");
    if (env.memory && env.memory.total_bytes) fields.memory = bytes(env.memory.total_bytes);
    fields.gpu = env.gpu && env.gpu.length ? env.gpu.map(g => typeof g === "object"
      ? [g.name, g.memory_total_mb ? g.memory_total_mb + " MB" : null].filter(Boolean).join(" ")
      : String(g)).join("; ") : "none";
    if (env.cuda) fields.cuda = Object.entries(env.cuda).filter(([, v]) => v)
      .map(([k, v]) => `${k} ${v}`).join(", ") || "none";
    if (env.git) fields.git = typeof env.git === "object" ? JSON.stringify(env.git) : env.git;
    fields.fingerprint = h("span", { class: "mono" }, env.hash);
    const pkgs = env.packages || [];
    return R.section("Environment", h("div", { class: "env" }, R.kv(fields)),
      h("h3", {}, `Packages (${pkgs.length})`),
      filtered(pkgs, p => p.name, shown => R.table([
        { label: "Package", get: p => p.name, class: "mono" },
        { label: "Version", get: p => p.version },
      ], shown, { class: "packages" }), "filter packages", "scroll"));
  }

  function codeSection(code) {
    if (!code.files.length) return null;
    return R.section("Code snapshot",
      h("p", { class: "muted" }, "snapshot ", h("span", { class: "mono" }, code.hash.slice(0, 12))),
      h("div", { class: "code" }, code.files.map((f, i) => h("details", { open: i === 0 },
        h("summary", { class: "mono" }, f.path, " ", h("span", { class: "muted" }, bytes(f.size))),
        f.text === null ? h("p", { class: "muted" }, "(binary)")
          : h("pre", { class: "code-file" }, f.text + (f.truncated ? "\n…" : ""))))));
  }

  // -- the page ---------------------------------------------------------------------------

  R.page(async (main) => {
    const id = R.params().get("id");
    if (!id) {
      main.append(h("h1", {}, "Run"),
        h("p", { class: "error" }, "No run given: open a run from the ", h("a", { href: "/runs" }, "runs"), " page."));
      return;
    }
    const base = `/runs/${enc(id)}`;
    const run = await R.api(base);
    document.title = `${run.name} · Reprise`;
    const [keys, models, arts, env, code] = await Promise.all([
      R.api(base + "/metric-keys"), R.api(base + "/models"), R.api(base + "/artifacts"),
      run.env_hash ? R.api(base + "/environment") : Promise.resolve(null),
      R.api(base + "/code"),
    ]);
    const steps = run.steps || [];
    main.append(header(run, models.models));
    if (run.error) {
      main.append(R.section("Error", h("pre", { class: "traceback" }, run.error)));
    }
    main.append(h("div", { class: "row" }, summary(run),
      R.section("Parameters", R.kv(flatParams(run.params)))));
    const series = keys.keys.filter(k => k.points > 1);
    const model = series.filter(k => !k.system);
    const system = series.filter(k => k.system);
    const once = keys.keys.filter(k => k.system && k.points <= 1);
    const starts = [], refreshes = [];
    if (model.length) {
      const sec = chartsSection("Metrics", run, model, "model-metrics");
      main.append(sec);
      starts.push(sec.start);
      refreshes.push(sec.refresh);
    }
    main.append(finalMetrics(run));
    const energyParts = energy(run, steps, once);
    if (system.length || energyParts.length) {
      const sec = system.length ? chartsSection("System and energy", run, system, "system-metrics")
        : R.section("System and energy");
      sec.classList.add("system");
      sec.append(...energyParts);
      main.append(sec);
      if (system.length) { starts.push(sec.start); refreshes.push(sec.refresh); }
    }
    const st = stepsSection(run, steps);
    if (st) main.append(st);
    main.append(arts.artifacts.length ? artifactsSection(run, arts.artifacts)
      : R.section("Artifacts", h("p", { class: "muted" }, "none")));
    if (env) main.append(environmentSection(env));
    const cs = codeSection(code);
    if (cs) main.append(cs);
    await Promise.all(starts.map(s => s()));
    if (run.status === "running") live(base, keys, refreshes);
  });

  /** While the run is running: its charts follow it every few seconds; when it ends, or
      logs a new series, the page is drawn again. */
  function live(base, keys, refreshes) {
    const known = new Set(keys.keys.filter(k => k.points > 1).map(k => k.key));
    const note = h("p", { class: "muted live" }, `running: updated every ${LIVE_S} s`);
    document.querySelector(".run-head").append(note);
    const tick = async () => {
      const [now, ks] = await Promise.all([R.api(base), R.api(base + "/metric-keys")]);
      const grown = ks.keys.some(k => k.points > 1 && !known.has(k.key));
      if (now.status !== "running" || grown) { location.reload(); return; }
      await Promise.all(refreshes.map(r => r()));
      note.textContent = `running: updated ${R.time(Date.now() / 1000)}`;
      setTimeout(loop, LIVE_S * 1000);
    };
    const loop = () => tick().catch(err => { note.textContent = String(err && err.message || err); });
    setTimeout(loop, LIVE_S * 1000);
  }
})();
