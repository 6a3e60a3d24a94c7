/* Lineage: the upstream graph of a run, an artifact or a model version (/api/lineage),
   drawn with Plotly in layers from the data (left) to what was made from it (right);
   Plotly gives pan and zoom, and a click on a node shows its details beside the graph. */
"use strict";

R.page(async (main) => {
  const { h } = R;
  const ref = (R.params().get("ref") || "").trim();
  main.append(h("h1", {}, "Lineage"));
  const input = h("input", { type: "search", class: "query", name: "ref", value: ref,
    placeholder: "run id, artifact hash, NAME@ALIAS or NAME:VERSION", "aria-label": "lineage of" });
  main.append(h("form", { class: "toolbar", action: "/lineage", method: "get" }, input,
    h("button", { type: "submit", class: "primary" }, "Show")));

  if (!ref) {
    const runs = await R.api("/runs?limit=15&top_level=true");
    main.append(R.section("Recent runs",
      runs.runs.length ? R.table([
        { label: "Run", get: r => h("a", { href: R.link("lineage", { ref: r.id }) }, r.id) },
        { label: "Name", get: r => r.name },
        { label: "Status", get: r => R.badge(r.status) },
        { label: "Started", get: r => R.time(r.started_at) },
      ], runs.runs, { class: "lineage-runs" }) : h("p", { class: "muted" }, "No runs yet.")));
    return;
  }

  let data;
  try {
    data = await R.api("/lineage?ref=" + encodeURIComponent(ref));
  } catch (err) {
    if (!(err instanceof R.ApiError) || err.status === 401) throw err;
    main.append(h("div", { class: "error", role: "alert" }, err.message));
    return;
  }
  const what = { run: "run", model: "model version", artifact: "artifact" }[data.kind] || data.kind;
  main.append(h("p", { class: "muted" }, `Upstream of ${what} `, h("code", {}, data.ref),
    `: ${data.nodes.length} nodes. Drag to pan, scroll to zoom, click a node for its details.`));

  if (!data.edges.length) {  // a run outside any pipeline records no steps
    main.append(h("p", { class: "muted", id: "lineage-empty" },
      "Nothing upstream is recorded: lineage is kept for pipeline runs (reprise run) and what they made."));
  }
  const graphDiv = h("div", { id: "lineage-graph", class: "chart", style: "height: 640px" });
  const side = h("aside", { class: "card", id: "lineage-details", style: "flex: 0 0 360px" },
    h("h2", {}, "Details"), h("p", { class: "muted" }, "Click a node."));
  main.append(h("div", { class: "row" },
    h("section", { class: "card", style: "flex: 1 1 700px" }, graphDiv), side));

  const nodes = data.nodes;
  const index = new Map(nodes.map((n, i) => [n.id, i]));
  const preds = nodes.map(() => []);
  for (const e of data.edges) preds[index.get(e.to)].push(index.get(e.from));

  // layers: the longest path from a source (the graph is acyclic: an artifact node is one
  // step run's output)
  const layer = new Array(nodes.length).fill(-1);
  const depth = (i, seen) => {
    if (layer[i] >= 0) return layer[i];
    if (seen.has(i)) return 0;
    seen.add(i);
    layer[i] = preds[i].reduce((m, p) => Math.max(m, depth(p, seen) + 1), 0);
    return layer[i];
  };
  nodes.forEach((_, i) => depth(i, new Set()));
  // a source (a dataset, the code) sits just before the first node that reads it
  const succs = nodes.map(() => []);
  for (const e of data.edges) succs[index.get(e.from)].push(index.get(e.to));
  nodes.forEach((_, i) => {
    if (!preds[i].length && succs[i].length) layer[i] = Math.min(...succs[i].map(j => layer[j])) - 1;
  });
  // within a layer, nodes ordered by the mean position of their predecessors
  const y = new Array(nodes.length).fill(0);
  const layers = [];
  nodes.forEach((_, i) => (layers[layer[i]] = layers[layer[i]] || []).push(i));
  for (const members of layers) {
    if (!members) continue;
    const key = i => preds[i].length ? preds[i].reduce((s, p) => s + y[p], 0) / preds[i].length : 0;
    members.sort((a, b) => key(a) - key(b));
    members.forEach((i, k) => { y[i] = k - (members.length - 1) / 2; });
  }

  const STYLE = {
    dataset: { color: "#1a7f37", symbol: "diamond", size: 20 },
    file: { color: "#5b8f3a", symbol: "diamond-open", size: 18 },
    code: { color: "#7c3aed", symbol: "hexagon", size: 18 },
    step: { color: "#2f5fd0", symbol: "square", size: 16 },
    artifact: { color: "#9aa3b2", symbol: "circle", size: 12 },
    run: { color: "#b26a00", symbol: "star", size: 22 },
    model: { color: "#c62828", symbol: "star-diamond", size: 24 },
  };
  const style = n => STYLE[n.kind] || { color: "#444", symbol: "circle", size: 12 };
  const short = s => (s.length > 18 ? s.slice(0, 17) + "…" : s);
  const annotations = data.edges.map(e => {
    const a = index.get(e.from), b = index.get(e.to);
    return { x: layer[b], y: y[b], ax: layer[a], ay: y[a], xref: "x", yref: "y", axref: "x",
             ayref: "y", showarrow: true, arrowhead: 2, arrowsize: 1, arrowwidth: 1,
             arrowcolor: "#b8bfcc", standoff: 9, startstandoff: 7, text: "" };
  });
  const trace = {
    type: "scatter", mode: "markers+text", x: nodes.map((_, i) => layer[i]), y,
    text: nodes.map(n => R.plotText(short(String(n.label)))),
    // labels above and below in turn, layer by layer, so that neighbours' do not collide
    textposition: nodes.map((_, i) => (layer[i] % 2 ? "top center" : "bottom center")),
    customdata: nodes.map((_, i) => i),
    hovertext: nodes.map(n => R.plotText(`${n.kind}: ${n.label}`)), hoverinfo: "text",
    marker: { color: nodes.map(n => style(n).color), symbol: nodes.map(n => style(n).symbol),
              size: nodes.map(n => style(n).size), line: { width: 1, color: "#fff" } },
    textfont: { size: 11 },
  };
  // the same nodes as a list (keyboard and screen readers reach them; a click selects)
  main.append(R.section("Nodes", R.table([
    { label: "Kind", get: n => R.badge(n.kind) },
    { label: "Node", get: n => h("a", { href: "#", class: "node-link", onclick: ev => {
      ev.preventDefault(); show(index.get(n.id)); side.scrollIntoView({ block: "nearest" });
    } }, n.label) },
    { label: "Hash", get: n => h("span", { class: "mono" }, n.hash ? n.hash.slice(0, 16) : "—") },
  ], nodes, { class: "lineage-nodes" })));
  const axis = { visible: false, zeroline: false, showgrid: false };
  await R.chart(graphDiv, [trace], {
    annotations, showlegend: false, dragmode: "pan", margin: { l: 20, r: 20, t: 20, b: 20 },
    xaxis: Object.assign({ range: [-0.6, layers.length - 0.4] }, axis),
    yaxis: Object.assign({}, axis),
  }, { scrollZoom: true });

  const pageOf = n => {
    if (n.kind === "dataset") return R.link("dataset", { name: n.dataset, version: n.version });
    if (n.kind === "model") return R.link("model", { name: n.model, version: n.version });
    return null;
  };
  const cell = (k, v) => {
    if (v === null || v === undefined) return v;
    if (k === "run") return h("a", { href: R.link("run", { id: v }) }, v);
    if (k === "hash" || k === "cache_key" || k === "package") return h("span", { class: "mono" }, v);
    if (k === "status") return R.badge(v);
    return v;
  };
  function show(i) {
    const n = nodes[i];
    const details = {};
    for (const [k, v] of Object.entries(n)) {
      if (["id", "label"].includes(k) || v === null || v === undefined) continue;
      details[k] = cell(k, v);
    }
    const links = [];
    const page = pageOf(n);
    if (page) links.push(h("a", { href: page }, n.kind === "dataset" ? "Open the dataset" : "Open the model"));
    if (n.kind === "run") links.push(h("a", { href: R.link("run", { id: n.run }) }, "Open the run"));
    const again = n.kind === "run" ? n.run : n.kind === "model" ? n.label
      : n.kind === "artifact" ? n.hash : null;
    if (again && again !== data.ref) links.push(h("a", { href: R.link("lineage", { ref: again }) }, "Lineage of this"));
    const incoming = data.edges.filter(e => e.to === n.id).map(e => nodes[index.get(e.from)].label);
    const outgoing = data.edges.filter(e => e.from === n.id).map(e => nodes[index.get(e.to)].label);
    side.replaceChildren(
      h("h2", {}, n.label), h("p", {}, R.badge(n.kind)),
      R.kv(Object.assign(details, { from: incoming.join(", ") || null, to: outgoing.join(", ") || null })),
      h("p", { class: "links" }, links.flatMap((a, k) => (k ? [" · ", a] : [a]))));
    side.dataset.node = n.id;
  }
  graphDiv.on("plotly_click", ev => {
    const p = ev && ev.points && ev.points[0];
    if (p && p.customdata !== undefined) show(p.customdata);
  });

});
