/* Runs: the runs table from /api/runs (filtered and sorted by the server), nested runs
   folded under their parent (/api/run-children), param and metric columns to choose,
   paging, live updates while runs are running, and a selection to compare. The view
   (query, sort, page, columns) lives in the URL, so that it can be shared. */
"use strict";

R.page(async (main) => {
  const h = R.h;
  const PER_PAGE = 50;
  const POLL_MS = 3000;
  const DEFAULT_SORT = "-started_at";
  const url = R.params();
  const st = {
    q: url.get("q") || "",
    sort: url.get("sort") || DEFAULT_SORT,
    page: Math.max(1, parseInt(url.get("page"), 10) || 1),
    cols: url.has("cols") ? url.get("cols").split(",").filter(Boolean) : null,
    flat: url.get("flat") === "1",
    limit: Math.min(1000, Math.max(1, parseInt(url.get("limit"), 10) || PER_PAGE)),
  };
  const expanded = new Set();
  const selected = new Set();
  let rows = [];
  let total = 0;
  let children = new Map();  // parent id -> its nested runs (loaded)
  let steps = new Map();     // pipeline run id -> its steps (loaded when unfolded)
  let timer = null;
  let running = null;        // ids running at the last poll

  const FIXED = [
    { key: "id", label: "Run" }, { key: "name", label: "Name" }, { key: "kind", label: "Kind" },
    { key: "status", label: "Status" }, { key: "started_at", label: "Started" },
    { key: "duration", label: "Duration" },
  ];
  const tree = () => !st.q && !st.flat;

  // -- the toolbar: query box, its message, options -------------------------------------
  const input = h("input", { type: "search", class: "query", name: "q", value: st.q,
    placeholder: "metrics.f1 > 0.9 and params.lr < 0.01", "aria-label": "query",
    spellcheck: "false" });
  const form = h("form", { class: "toolbar", role: "search", onsubmit: (e) => {
    e.preventDefault(); st.q = input.value.trim(); st.page = 1; act(load);
  } }, input, h("button", { type: "submit", class: "primary" }, "Filter"),
  h("button", { type: "button", onclick: () => {
    input.value = ""; st.q = ""; st.page = 1; act(load);
  } }, "Clear"));
  const message = h("div", { id: "query-message" });
  const compareBtn = h("button", { type: "button", class: "primary", id: "compare",
    disabled: true, onclick: () => {
      location.href = R.link("compare", { ids: [...selected].join(",") });
    } }, "Compare");
  const selInfo = h("span", { class: "muted" });
  const flatBox = h("input", { type: "checkbox", id: "flat", checked: st.flat,
    onchange: () => { st.flat = flatBox.checked; st.page = 1; act(load); } });
  const colsList = h("div", { class: "cols-list" });
  const colsBox = h("details", { class: "cols" }, h("summary", {}, "Columns"), colsList);
  const info = h("span", { class: "muted", id: "runs-info" });
  const holder = h("div", { class: "table-wrap" });
  const pager = h("div", { class: "toolbar pager" });
  const hint = h("p", { class: "muted hint" }, "Compare id, name, kind, status, parent_id, " +
    "started_at, ended_at, duration, metrics.KEY, params.KEY or tags.KEY with = != < <= > >= " +
    "to a number, a \"string\", true, false or null; join with and, or, not, ( ).");
  main.append(h("h1", {}, "Runs"), form, message, hint,
    h("div", { class: "toolbar" }, compareBtn, selInfo,
      h("label", { for: "flat" }, flatBox, " flat list (nested runs too)"), colsBox, info),
    holder, pager);

  // what a click starts: an error the API did not foresee is shown, not lost
  function act(fn) {
    fn().catch(err => { console.warn(err); showMessage(String(err && err.message || err)); });
  }

  function showMessage(text) {
    message.replaceChildren(...(text ? [h("div", { class: "error", role: "alert" }, text)] : []));
  }

  function syncUrl() {
    const q = new URLSearchParams();
    if (st.q) q.set("q", st.q);
    if (st.sort !== DEFAULT_SORT) q.set("sort", st.sort);
    if (st.page > 1) q.set("page", st.page);
    if (st.cols) q.set("cols", st.cols.join(","));
    if (st.flat) q.set("flat", "1");
    if (st.limit !== PER_PAGE) q.set("limit", st.limit);
    const s = q.toString();
    history.replaceState(null, "", location.pathname + (s ? "?" + s : ""));
  }

  // -- data -------------------------------------------------------------------------------
  async function load() {
    syncUrl();
    const qs = new URLSearchParams({ sort: st.sort, limit: st.limit, offset: (st.page - 1) * st.limit });
    if (st.q) qs.set("q", st.q);
    if (tree()) qs.set("top_level", "true");
    let data;
    try {
      data = await R.api("/runs?" + qs);
    } catch (err) {
      if (err instanceof R.ApiError && err.status === 400) { showMessage(err.message); return; }
      throw err;
    }
    showMessage("");
    rows = data.runs;
    total = data.total;
    children = new Map();
    steps = new Map();
    if (tree()) {
      await loadChildren(rows.map(r => r.id));
      // the runs still unfolded, level by level (a study, its trial, the trial's pipeline)
      let todo;
      while ((todo = [...expanded].map(find).filter(r => r && !loaded(r))).length) {
        await loadChildren(todo.map(r => r.id), todo.filter(isPipeline).map(r => r.id));
      }
    }
    render();
    schedule();
  }

  const isPipeline = r => r.kind === "pipeline";
  const loaded = r => children.has(r.id) && (!isPipeline(r) || steps.has(r.id));

  function find(id) {
    const all = [rows, ...children.values()];
    for (const list of all) for (const r of list) if (r.id === id) return r;
    return null;
  }

  async function loadChildren(ids, stepsOf = []) {
    if (!ids.length) return;
    const qs = new URLSearchParams({ ids: ids.join(",") });
    if (stepsOf.length) qs.set("steps", stepsOf.join(","));
    const data = await R.api("/run-children?" + qs);
    for (const [id, kids] of Object.entries(data.children)) children.set(id, kids);
    for (const [id, list] of Object.entries(data.steps)) steps.set(id, list);
  }

  async function toggle(r) {
    if (expanded.has(r.id)) expanded.delete(r.id);
    else {
      expanded.add(r.id);
      if (!loaded(r)) await loadChildren([r.id], isPipeline(r) ? [r.id] : []);
    }
    render();
    schedule();
  }

  // -- columns ------------------------------------------------------------------------------
  function visible() {
    const out = [];
    const walk = (r, depth) => {
      out.push({ r, depth });
      if (!tree() || !expanded.has(r.id)) return;
      for (const s of steps.get(r.id) || []) out.push({ r: s, depth: depth + 1, step: true });
      for (const c of children.get(r.id) || []) walk(c, depth + 1);
    };
    rows.forEach(r => walk(r, 0));
    return out;
  }

  function foundKeys(list) {
    const count = new Map();
    const nested = new Set();  // params holding objects (a dataset's reference...)
    for (const { r } of list) {
      for (const p of ["params", "metrics"]) {
        for (const [k, v] of Object.entries(r[p] || {})) {
          count.set(p + "." + k, (count.get(p + "." + k) || 0) + 1);
          if (v !== null && typeof v === "object") nested.add(p + "." + k);
        }
      }
    }
    return { count, nested };
  }

  function chosen({ count, nested }) {
    let cols = st.cols;
    if (!cols) {  // the most common plain params (3) and metrics (5) of the page
      const byUse = [...count.keys()].filter(k => !nested.has(k))
        .sort((a, b) => count.get(b) - count.get(a) || a.localeCompare(b));
      cols = [...byUse.filter(k => k.startsWith("params.")).slice(0, 3),
              ...byUse.filter(k => k.startsWith("metrics.")).slice(0, 5)];
    }
    const sortKey = st.sort.replace(/^[-+]/, "");
    if (/^(params|metrics)\./.test(sortKey) && !cols.includes(sortKey)) cols = [...cols, sortKey];
    const params = cols.filter(k => k.startsWith("params.")).sort();
    const metrics = cols.filter(k => k.startsWith("metrics.")).sort();
    return [...params, ...metrics];
  }

  function drawColumnChooser(found, cols) {
    const keys = [...new Set([...found.count.keys(), ...cols])].sort();
    colsList.replaceChildren(...(keys.length ? keys.map(k => h("label", { class: "col-choice" },
      h("input", { type: "checkbox", value: k, checked: cols.includes(k), onchange: (e) => {
        const now = new Set(chosen(found));
        if (e.target.checked) now.add(k); else now.delete(k);
        st.cols = [...now];
        render();
        syncUrl();
      } }), " " + k)) : [h("p", { class: "muted" }, "no params or metrics on this page")]));
  }

  // -- the table ----------------------------------------------------------------------------
  function setSort(key) {
    const now = st.sort.replace(/^[-+]/, "");
    if (now === key) st.sort = st.sort.startsWith("-") ? key : "-" + key;
    else st.sort = /^(metrics\.|started_at$|ended_at$|duration$)/.test(key) ? "-" + key : key;
    st.page = 1;
    act(load);
  }

  function head(key, label, cls) {
    const now = st.sort.replace(/^[-+]/, "");
    const desc = st.sort.startsWith("-");
    const arrow = now === key ? (desc ? " ▼" : " ▲") : "";
    return h("th", { class: cls, dataset: { sort: key }, title: "sort by " + key, onclick: () => setSort(key),
      "aria-sort": now === key ? (desc ? "descending" : "ascending") : "none" },
    // a long metric name may break after each "/" (train_mlp/val/loss)
    label.split("/").map((part, i, all) => i < all.length - 1 ? [part + "/", h("wbr")] : part),
    arrow);
  }

  function value(r, key) {
    const [p, ...rest] = key.split(".");
    return (r[p] || {})[rest.join(".")];
  }

  function duration(r) {
    if (r.duration !== null && r.duration !== undefined) return R.duration(r.duration);
    if (r.status === "running" && r.started_at) return R.duration(Date.now() / 1000 - r.started_at);
    return "—";
  }

  function cell(v) {  // long values (a dataset reference) cut, whole in the tooltip
    const text = R.fmt(v);
    return text.length > 40 ? h("td", { class: "num", title: text }, text.slice(0, 39) + "…")
      : h("td", { class: "num" }, text);
  }

  // nested runs under a run: those loaded for the page's own rows, else the count the
  // API gave with a nested row
  const nestedCount = (r, depth) => depth === 0 ? (children.get(r.id) || []).length : (r.children || 0);
  const indent = depth => `padding-left:${0.5 + depth * 1.4}rem`;

  function idCell(r, depth) {
    const n = nestedCount(r, depth);
    const kids = tree() && (n > 0 || isPipeline(r));  // a pipeline run folds its steps
    const open = expanded.has(r.id);
    const what = (n ? `${n} nested run${n === 1 ? "" : "s"}` : "") +
      (isPipeline(r) ? (n ? " and " : "") + "the steps" : "");
    const btn = kids ? h("button", { type: "button", class: "fold", "aria-expanded": String(open),
      title: (open ? "hide " : "show ") + what,
      "aria-label": (open ? "collapse " : "expand ") + r.id, onclick: () => act(() => toggle(r)) },
    open ? "▾" : "▸") : h("span", { class: "fold-space" });
    return h("td", { class: "mono run-id", style: indent(depth) }, btn,
      h("a", { href: R.link("run", { id: r.id }) }, r.id),
      kids && n ? h("span", { class: "muted nested-count" }, " (" + n + ")") : null,
      !tree() && r.parent_id ? h("span", { class: "muted parent" }, " in ",
        h("a", { href: R.link("run", { id: r.parent_id }), title: r.parent_id },
          r.parent_id.slice(0, 10) + "…")) : null);
  }

  function stepRow(s, depth, cols) {  // a pipeline's step: executed, cached or failed
    return h("tr", { class: "nested step", dataset: { step: s.id, depth: String(depth) } },
      h("td", { class: "pick" }), h("td", { class: "mono run-id", style: indent(depth) },
        h("span", { class: "fold-space" }), h("span", { class: "muted" }, "step")),
      h("td", { class: "step-name" }, s.step_name), h("td", {}, "step"),
      h("td", { class: "status" }, R.badge(s.status)), h("td", {}, R.time(s.started_at)),
      h("td", {}, R.duration(s.duration)), cols.map(() => h("td", {})));
  }

  function render() {
    const list = visible();
    const runsShown = list.filter(v => !v.step);
    const found = foundKeys(runsShown);
    const cols = chosen(found);
    drawColumnChooser(found, cols);
    const pick = h("input", { type: "checkbox", "aria-label": "select all on this page",
      checked: runsShown.length > 0 && runsShown.every(({ r }) => selected.has(r.id)),
      onchange: (e) => {
        for (const { r } of runsShown) { if (e.target.checked) selected.add(r.id); else selected.delete(r.id); }
        render();
      } });
    const headRow = h("tr", {}, h("th", { class: "pick" }, pick),
      FIXED.map(c => head(c.key, c.label)),
      cols.map(k => head(k, k.replace(/^metrics\./, "").replace(/^params\./, "param: "), "col-head")));
    const body = list.map(({ r, depth, step }) => step ? stepRow(r, depth, cols) : h("tr", {
      dataset: { id: r.id, depth: String(depth) }, class: depth ? "nested" : "" },
    h("td", { class: "pick" }, h("input", { type: "checkbox", "aria-label": "select " + r.id,
      checked: selected.has(r.id), onchange: (e) => {
        if (e.target.checked) selected.add(r.id); else selected.delete(r.id);
        updateSelection();
      } })),
    idCell(r, depth), h("td", { class: "name" }, r.name), h("td", {}, r.kind),
    h("td", { class: "status" }, R.badge(r.status)), h("td", {}, R.time(r.started_at)),
    h("td", {}, duration(r)),
    cols.map(k => cell(value(r, k)))));
    if (!list.length) {
      body.push(h("tr", {}, h("td", { colspan: FIXED.length + cols.length + 1, class: "muted" },
        st.q ? "No run matches this query." : "No runs yet: `reprise run` records one.")));
    }
    holder.replaceChildren(h("table", { class: "grid runs" }, h("thead", {}, headRow),
      h("tbody", {}, body)));
    const first = rows.length ? (st.page - 1) * st.limit + 1 : 0;
    const last = (st.page - 1) * st.limit + rows.length;
    info.textContent = `${first}–${last} of ${total} ` +
      (tree() ? "runs (nested runs folded under their parent)" : "runs");
    pager.replaceChildren(
      h("button", { type: "button", disabled: st.page <= 1, onclick: () => { st.page -= 1; act(load); } }, "‹ Previous"),
      h("span", { class: "muted" }, `page ${st.page} of ${Math.max(1, Math.ceil(total / st.limit))}`),
      h("button", { type: "button", disabled: last >= total, onclick: () => { st.page += 1; act(load); } }, "Next ›"));
    updateSelection();
  }

  function updateSelection() {
    compareBtn.disabled = selected.size < 2;
    selInfo.textContent = selected.size ? `${selected.size} selected` : "select two runs or more to compare";
  }

  // -- live updates: while a shown run is running, poll the running runs (a cheap query the
  //    store answers itself); a run that ends or starts reloads the view ----------------------
  function schedule() {
    clearTimeout(timer);
    timer = null;
    if (visible().some(({ r, step }) => !step && r.status === "running")) timer = setTimeout(() => act(poll), POLL_MS);
    else running = null;
  }

  async function poll() {
    timer = null;
    if (document.hidden) { schedule(); return; }
    let data;
    try {
      data = await R.api("/runs?" + new URLSearchParams({ q: 'status = "running"', limit: 1000 }));
    } catch (err) { console.warn("runs: live update failed", err); schedule(); return; }
    const now = new Set(data.runs.map(r => r.id));
    const changed = running !== null && (now.size !== running.size || [...now].some(id => !running.has(id)));
    const shown = visible().filter(v => !v.step).map(({ r }) => r);
    const ended = shown.some(r => r.status === "running" && !now.has(r.id));
    running = now;
    if (changed || ended) { await load(); return; }
    const fresh = new Map(data.runs.map(r => [r.id, r]));
    for (const r of shown) if (fresh.has(r.id)) Object.assign(r, fresh.get(r.id));
    render();
    schedule();
  }

  await load();
});
