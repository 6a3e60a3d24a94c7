"""The lineage part of the dashboard's API: the upstream graph of a run, an artifact or a
registered model version, as nodes and edges for the lineage page to draw. The graph is
the one ``reprise lineage`` prints (``reprise.pipeline._lineage.lineage``, and the
registry's ``model_lineage`` for ``NAME@ALIAS`` / ``NAME:VERSION``), flattened: each step
run, each artifact as the output of one step run, each dataset version or raw file read,
the code snapshot, and the run or model the graph is of."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from reprise.core.errors import UserError
from reprise.ui._context import UiContext, clean

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["graph", "router"]

_DATASET_REF = re.compile(r"^(?P<name>[^@\s]+)@(?P<version>[0-9]+)$")


class _Graph:
    """Nodes (by id, in the order first met) and edges (each once)."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.edges: list[dict[str, Any]] = []
        self._edge_keys: set[tuple[str, str]] = set()

    def node(self, nid: str, kind: str, label: str, **details: Any) -> str:
        if nid not in self.nodes:
            self.nodes[nid] = {"id": nid, "kind": kind, "label": label, **details}
        return nid

    def edge(self, src: str, dst: str, label: str | None = None) -> None:
        if (src, dst) not in self._edge_keys:
            self._edge_keys.add((src, dst))
            self.edges.append({"from": src, "to": dst, "label": label})


def graph(ws: Any, tree: dict[str, Any]) -> dict[str, Any]:
    """The lineage tree (``reprise lineage --json``) as ``{nodes, edges}``; edges point
    the way data flows (input -> step -> output -> run or model)."""
    g = _Graph()
    datasets: dict[str, Any] = {}

    def artifact(node: dict[str, Any]) -> str:
        h = str(node["hash"])
        if node.get("kind") == "input":
            return source(node)
        prod = node.get("produced_by")
        name = node.get("name")
        if not prod:
            return g.node(f"artifact:{h}", "artifact", name or h[:12], hash=h, name=name)
        # an artifact as the output of one step run: a step that passes its input through
        # unchanged outputs the same hash, which stays two nodes (no cycle)
        aid = g.node(f"artifact:{prod['step_run']}:{h}", "artifact", name or h[:12], hash=h,
                     name=name, step=prod["step"], run=prod["run"])
        sid = g.node(f"step:{prod['step_run']}", "step", str(prod["step"]),
                     step=prod["step"], step_run=prod["step_run"], run=prod["run"],
                     status=prod.get("status"), cache_key=prod.get("cache_key"))
        g.edge(sid, aid, name)
        if not node.get("repeated"):
            for i in prod.get("inputs", ()):
                g.edge(artifact(i), sid, i.get("name"))
        return aid

    def source(node: dict[str, Any]) -> str:
        src, h = str(node.get("source")), str(node["hash"])
        m = _DATASET_REF.match(src)
        if m is None:
            return g.node(f"file:{h}", "file", src, hash=h, path=src, name=node.get("name"))
        if src not in datasets:
            datasets[src] = ws.metadata.get_dataset_version(m["name"], int(m["version"]))
        rec = datasets[src]
        details = {"format": rec.format, "rows": rec.rows} if rec is not None else {}
        return g.node(f"dataset:{src}", "dataset", src, hash=h, dataset=m["name"],
                      version=int(m["version"]), **details)

    roots = [artifact(n) for n in tree.get("nodes", ())]
    kind = tree.get("kind")
    if kind == "run":
        rec = ws.metadata.get_run(tree["root"])
        top = g.node(f"run:{rec.id}", "run", rec.name or rec.id, run=rec.id,
                     status=rec.status.value, pipeline=tree.get("pipeline"))
        for r in roots:
            g.edge(r, top, "output")
        _code(g, rec, top)
    elif kind == "model":
        top = g.node(f"model:{tree['model']}", "model", str(tree["model"]),
                     model=str(tree["model"]).split(":")[0], ref=tree.get("ref"),
                     version=int(str(tree["model"]).split(":")[-1]), run=tree.get("run"),
                     package=tree.get("root"))
        for r in roots:
            g.edge(r, top, "package")
        if tree.get("run"):
            rec = ws.metadata.get_run(tree["run"])
            run = g.node(f"run:{rec.id}", "run", rec.name or rec.id, run=rec.id,
                         status=rec.status.value, pipeline=rec.tags.get("reprise.pipeline"))
            g.edge(run, top, "registered from")
            _code(g, rec, run)
    return {"ref": tree.get("ref") or tree.get("root"), "kind": kind,
            "root": tree.get("root"), "nodes": list(g.nodes.values()), "edges": g.edges}


def _code(g: _Graph, rec: Any, run_node: str) -> None:
    snapshot = rec.tags.get("reprise.code_snapshot")
    if snapshot:
        code = g.node(f"code:{snapshot}", "code", f"code {snapshot[:12]}", hash=snapshot,
                      pipeline=rec.tags.get("reprise.pipeline"), git_commit=rec.git_commit,
                      git_dirty=rec.git_dirty)
        g.edge(code, run_node, "code")


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Query

    router = APIRouter(tags=["lineage"])

    @router.get("/api/lineage", summary="The upstream graph of a run, artifact or model "
                "version, down to dataset versions, raw files and code")
    def lineage(ref: str = Query(..., description="A run id (or a unique prefix), a full "
                                 "64-character artifact hash, or a registered model version "
                                 "as NAME@ALIAS or NAME:VERSION.")) -> dict[str, Any]:
        from reprise.core._hashing import is_hash
        from reprise.pipeline._lineage import lineage as build

        ref = ref.strip()
        if not ref:
            raise UserError("give a run id, an artifact hash, or NAME@ALIAS / NAME:VERSION.")
        ctx.fresh()
        if "@" in ref or ":" in ref:  # a registered model, as `reprise lineage` reads it
            from reprise.registry import model_lineage

            tree = model_lineage(ref, workspace=ctx.workspace)
        else:
            if is_hash(ref):
                ctx.store.get_artifact(ref)  # an unknown hash is a 404, not a lone node
            tree = build(ctx.workspace, ref)
        out: dict[str, Any] = clean(graph(ctx.workspace, tree))
        if tree.get("kind") == "model":
            out["summary"] = clean(tree.get("summary") or {})
        return out

    return router
