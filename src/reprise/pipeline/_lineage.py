"""``reprise lineage RUN|HASH``: the upstream graph of a run's outputs or of one
artifact, down to the raw input files, with every hash."""

from __future__ import annotations

from typing import Any

from reprise.core._hashing import is_hash
from reprise.core.errors import NotFoundError

__all__ = ["lineage", "to_dot", "to_mermaid"]


def lineage(ws: Any, ref: str) -> dict[str, Any]:
    """A tree ``{"kind", "hash", ..., "produced_by": {...,"inputs": [...]}}``.

    ``ref`` is a run id (prefix) — the roots are its final outputs (those no other
    step of the run consumed) — or a full artifact hash.
    """
    meta = ws.metadata
    if is_hash(ref):
        return {"kind": "artifact", "root": ref, "nodes": [_artifact_node(meta, ref, None, {})]}
    try:
        rec = meta.get_run(ref)
    except NotFoundError:
        raise NotFoundError(f"no run or artifact {ref!r}; give a run id (or a prefix) or a "
                            "full 64-character artifact hash.") from None
    steps = meta.get_step_runs(rec.id)
    consumed = {i["hash"] for st in steps for i in st["inputs"]}
    seen: dict[str, Any] = {}
    roots = []
    for st in steps:
        for o in st["outputs"]:
            if o["hash"] not in consumed:
                roots.append(_step_node(meta, o["hash"], o["name"], st, seen, steps))
    return {"kind": "run", "root": rec.id, "pipeline": rec.tags.get("reprise.pipeline"),
            "nodes": roots}


def _step_node(meta: Any, h: str, name: str, st: dict[str, Any], seen: dict[str, Any],
               steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Output ``h`` of run step ``st``; its inputs resolve to earlier steps of the run
    (latest first), so a step passing its input through is not its own producer."""
    key = f"{st['id']}:{h}"
    if key in seen:
        return {"hash": h, "name": name, "kind": "artifact", "repeated": True,
                "produced_by": seen[key]}
    info = {"step": st["step_name"], "step_run": st["id"], "run": st["run_id"],
            "status": st["status"], "cache_key": st["cache_key"]}
    seen[key] = info
    idx = next(i for i, s in enumerate(steps) if s["id"] == st["id"])
    inputs = []
    for x in st["inputs"]:
        if x.get("source") is not None:
            inputs.append({"hash": x["hash"], "name": x["name"], "kind": "input",
                           "source": x["source"]})
            continue
        prod = next((s for s in reversed(steps[:idx])
                     if any(o["hash"] == x["hash"] for o in s["outputs"])), None)
        if prod is None:
            inputs.append(_artifact_node(meta, x["hash"], x["name"], seen))
        else:
            inputs.append(_step_node(meta, x["hash"], x["name"], prod, seen, steps))
    return {"hash": h, "name": name, "kind": "artifact", "produced_by": {**info, "inputs": inputs}}


def _artifact_node(meta: Any, h: str, name: str | None, seen: dict[str, Any],
                   local: dict[str, Any] | None = None, source: str | None = None
                   ) -> dict[str, Any]:
    node: dict[str, Any] = {"hash": h, "name": name}
    if source is not None:
        node.update(kind="input", source=source)
        return node
    if h in seen:
        node.update(kind="artifact", repeated=True, produced_by=seen[h])
        return node
    st = (local or {}).get(h)
    if st is None:
        producers = meta.producers_of(h)
        st = producers[0] if producers else None
    if st is None:
        node["kind"] = "artifact"
        return node
    step_info = {"step": st["step_name"], "step_run": st["id"], "run": st["run_id"],
                 "status": st["status"], "cache_key": st["cache_key"]}
    seen[h] = step_info
    step_info = dict(step_info)
    step_info["inputs"] = [
        _artifact_node(meta, i["hash"], i["name"], seen, local, i.get("source"))
        for i in st["inputs"]]
    node.update(kind="artifact", produced_by=step_info)
    return node


def _edges(tree: dict[str, Any]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    labels: dict[str, str] = {}
    edges: list[tuple[str, str]] = []

    def walk(node: dict[str, Any]) -> str:
        aid = "a_" + str(node["hash"])[:12]
        if node.get("kind") == "input":
            labels[aid] = f"{node['source']}\\n{node['hash'][:12]}"
            return aid
        labels.setdefault(aid, f"{node.get('name') or 'artifact'}\\n{node['hash'][:12]}")
        prod = node.get("produced_by")
        if prod:
            sid = "s_" + prod["step_run"][-10:]
            labels.setdefault(sid, f"step {prod['step']}")
            if (sid, aid) not in edges:
                edges.append((sid, aid))
            for i in prod.get("inputs", ()):
                iid = walk(i)
                if (iid, sid) not in edges:
                    edges.append((iid, sid))
        return aid

    for n in tree["nodes"]:
        walk(n)
    return labels, edges


def to_mermaid(tree: dict[str, Any]) -> str:
    labels, edges = _edges(tree)
    lines = ["graph BT"]
    for nid, label in labels.items():
        text = label.replace("\\n", "<br/>").replace('"', "'")
        shape = f'[["{text}"]]' if nid.startswith("s_") else f'("{text}")'
        lines.append(f"  {nid}{shape}")
    lines += [f"  {a} --> {b}" for a, b in edges]
    return "\n".join(lines) + "\n"


def to_dot(tree: dict[str, Any]) -> str:
    labels, edges = _edges(tree)
    lines = ["digraph lineage {", "  rankdir=BT;"]
    for nid, label in labels.items():
        shape = "box" if nid.startswith("s_") else "ellipse"
        lines.append(f'  {nid} [label="{label.replace(chr(34), chr(39))}", shape={shape}];')
    lines += [f"  {a} -> {b};" for a, b in edges]
    lines.append("}")
    return "\n".join(lines) + "\n"
