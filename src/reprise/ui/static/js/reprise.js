/* The dashboard's shared script: the API client (with the bearer token), safe DOM
   building (user strings only ever become text, never HTML), the navigation bar,
   formatting and chart helpers. Every page script calls R.page(async main => {...}). */
"use strict";

const R = (() => {
  const TOKEN_KEY = "reprise-ui-token";
  const TITLES = {
    runs: "Runs", lineage: "Lineage", datasets: "Datasets", studies: "Studies",
    models: "Models", rollouts: "Rollouts", monitoring: "Monitoring", tradeoffs: "Trade-offs",
  };

  // a token given in the URL's fragment (#token=...) is kept for this tab and removed
  // from the address bar (the fragment never reaches the server)
  (() => {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
  })();

  class ApiError extends Error {
    constructor(status, detail) { super(detail); this.status = status; }
  }

  /** GET (or with opts, any method) /api + path; the parsed JSON, or an ApiError. */
  async function api(path, opts = {}) {
    const headers = Object.assign({ Accept: "application/json" }, opts.headers || {});
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    if (opts.json !== undefined) {
      headers["Content-Type"] = "application/json";
      opts = Object.assign({}, opts, { body: JSON.stringify(opts.json) });
    }
    const res = await fetch("/api" + path, Object.assign({}, opts, { headers }));
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (!res.ok) {
      let detail = body && body.detail;
      if (Array.isArray(detail)) detail = detail.map(d => (d.loc || []).join(".") + ": " + d.msg).join("; ");
      throw new ApiError(res.status, detail || res.statusText || ("HTTP " + res.status));
    }
    return body;
  }

  /** Build an element: h("a", {href: "/x", class: "c"}, "text", child...). Strings
      become text nodes; attributes starting with "on" are listeners. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else if (k === "class") el.className = v;
      else if (k === "dataset") Object.assign(el.dataset, v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  /** The link to a page with query parameters: link("run", {id: "abc"}). */
  function link(page, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null) q.set(k, v);
    const s = q.toString();
    return "/" + page + (s ? "?" + s : "");
  }

  function params() { return new URLSearchParams(location.search); }

  function fmt(v, digits = 4) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "number") {
      if (Number.isInteger(v)) return v.toLocaleString("en-US");
      const a = Math.abs(v);
      if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(digits - 1);
      return String(Number(v.toPrecision(digits)));
    }
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  /** A time (ISO string, or seconds since the epoch as the store keeps them) in UTC. */
  function time(t) {
    if (t === null || t === undefined || t === "") return "—";
    const d = new Date(typeof t === "number" ? t * 1000 : t);
    return isNaN(d) ? String(t) : d.toISOString().replace("T", " ").slice(0, 19);
  }

  function duration(s) {
    if (s === null || s === undefined) return "—";
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 120) return s.toFixed(1) + " s";
    if (s < 7200) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function badge(status) { return h("span", { class: "badge " + String(status) }, String(status)); }

  /** A table: cols = [{label, get(row) -> string|Node, sort?: key}], rows. */
  function table(cols, rows, opts = {}) {
    const head = h("tr", {}, cols.map(c => h("th", { dataset: c.sort ? { sort: c.sort } : {} }, c.label)));
    const body = rows.map(r => h("tr", opts.rowAttrs ? opts.rowAttrs(r) : {},
      cols.map(c => { const v = c.get(r); return h("td", { class: c.class }, v instanceof Node ? v : fmt(v)); })));
    return h("table", { class: "grid " + (opts.class || "") }, h("thead", {}, head), h("tbody", {}, body));
  }

  /** Key/value pairs as a two-column table. */
  function kv(obj) {
    const rows = Object.entries(obj || {});
    if (!rows.length) return h("p", { class: "muted" }, "none");
    return h("table", { class: "kv" }, h("tbody", {}, rows.map(([k, v]) =>
      h("tr", {}, h("th", {}, k), h("td", {}, v instanceof Node ? v : fmt(v))))));
  }

  /** Plotly with the dashboard's defaults (no logo, no links to plotly's cloud). */
  function chart(div, traces, layout = {}, config = {}) {
    const base = {
      margin: { l: 55, r: 20, t: 30, b: 40 }, hovermode: "closest",
      font: { family: "system-ui, sans-serif", size: 12 }, legend: { orientation: "h" },
    };
    return Plotly.newPlot(div, traces, Object.assign(base, layout),
      Object.assign({ responsive: true, displaylogo: false, showLink: false,
                      modeBarButtonsToRemove: ["sendDataToCloud"] }, config));
  }

  function section(title, ...content) {
    return h("section", { class: "card" }, h("h2", {}, title), ...content);
  }

  function showError(main, err) {
    if (err instanceof ApiError && err.status === 401) {
      const input = h("input", { type: "password", placeholder: "token", "aria-label": "token" });
      const form = h("form", { class: "card token", onsubmit: (e) => {
        e.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, input.value);
        location.reload();
      } }, h("p", {}, "This dashboard needs its token (REPRISE_UI_TOKEN)."), input,
        h("button", { type: "submit" }, "Open"));
      main.replaceChildren(form);
      return;
    }
    main.append(h("div", { class: "error", role: "alert" }, String(err && err.message || err)));
  }

  function nav() {
    const page = document.body.dataset.page;
    const pages = (document.body.dataset.nav || "").split(",").filter(Boolean);
    const bar = document.getElementById("nav");
    bar.replaceChildren(h("a", { class: "brand", href: "/runs" }, "Reprise"),
      h("nav", {}, pages.map(p => h("a", { href: "/" + p, class: p === page ? "active" : "" },
        TITLES[p] || p))));
  }

  /** Run a page's builder once the DOM (and plotly) are ready; errors are shown in it. */
  function page(build) {
    const go = async () => {
      nav();
      const main = document.getElementById("main");
      main.replaceChildren();
      try { await build(main); } catch (err) { console.warn(err); showError(main, err); }
    };
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", go);
    else go();
  }

  return { api, ApiError, h, link, params, fmt, time, duration, badge, table, kv, chart,
           section, showError, page };
})();

/* Bytes from the API (artifact downloads, images, HTML previews): GET /api + path with the
   token, as a Response; an R.ApiError when it is not 2xx. */
R.raw = async (path) => {
  const headers = {};
  const token = sessionStorage.getItem("reprise-ui-token");
  if (token) headers.Authorization = "Bearer " + token;
  const res = await fetch("/api" + path, { headers });
  if (!res.ok) {
    let detail = null;
    try { detail = (await res.json()).detail; } catch (e) { detail = null; }
    throw new R.ApiError(res.status, detail || ("HTTP " + res.status));
  }
  return res;
};

/* Save what GET /api + path answers as a file named `filename` (a link with the token
   cannot be followed by the browser itself, so the bytes go through a blob: URL). */
R.download = async (path, filename) => {
  const blob = await (await R.raw(path)).blob();
  const url = URL.createObjectURL(blob);
  const a = R.h("a", { href: url, download: filename || "download" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
};

/** The audit log, a page at a time, into ``box``: newest first, Newer/Older buttons.
    opts: {model (only its events), size (events a page), subject(e) (the Subject cell),
    reason (a Reason column)}. The models and model pages both show it. */
R.auditLog = async function auditLog(box, opts, offset = 0) {
  const size = opts.size || 20;
  const query = (opts.model ? "model=" + encodeURIComponent(opts.model) + "&" : "") +
    "limit=" + size + "&offset=" + offset;
  const page = await R.api("/audit?" + query);
  const prev = R.h("button", { disabled: offset === 0,
    onclick: () => R.auditLog(box, opts, Math.max(0, offset - size)) }, "Newer");
  const next = R.h("button", { disabled: offset + size >= page.total,
    onclick: () => R.auditLog(box, opts, offset + size) }, "Older");
  const shown = page.total ? (offset + 1) + "–" + (offset + page.events.length) + " of " + page.total : "no events";
  const cols = [
    { label: "#", get: e => e.seq },
    { label: "Time", get: e => R.time(e.time) },
    { label: "Actor", get: e => e.actor },
    { label: "Action", get: e => e.action },
    { label: "Subject", get: opts.subject || (e => e.subject) },
  ];
  if (opts.reason) cols.push({ label: "Reason", class: "wrap", get: e => e.payload.reason || "—" });
  cols.push({ label: "Details", class: "wrap mono", get: e => JSON.stringify(e.payload) });
  box.replaceChildren(
    R.h("div", { class: "toolbar" }, prev, next, R.h("span", { class: "muted" }, shown)),
    R.table(cols, page.events, { class: "audit" }));
};

/** The audit log's verification: ``label`` ("Verification: "), "intact" with a badge,
    or each problem found. */
R.auditStatus = function auditStatus(check, label = "Verification: ") {
  const line = R.h("p", { class: "audit-status" }, label, R.badge(check.status), " ",
    check.events + " event(s); head ", R.h("code", {}, check.head.slice(0, 16)));
  if (check.ok) return line;
  return R.h("div", {}, line, R.h("ul", { class: "problems" },
    check.problems.map(p => R.h("li", {}, p.kind + ": " + p.message))));
};

/** A user string for Plotly's texts (names, titles, tick and hover labels), which Plotly
    reads as its own small HTML: escaped, so that it shows as typed. */
R.plotText = s => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
