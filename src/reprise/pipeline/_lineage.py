"""``reprise lineage RUN|HASH``: the upstream graph of a run's outputs or of one
artifact, down to the raw input files, with every hash."""

from __future__ import annotations

from collections.abc import Callable
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
        def any_producer(consumer: dict[str, Any] | None, h: str) -> dict[str, Any] | None:
            # not the consumer itself: a step that passes its input through unchanged
            # outputs the same hash, and would stop the walk short of the raw inputs
            producers = [p for p in meta.producers_of(h)
                         if consumer is None or p["id"] != consumer["id"]]
            if consumer is not None:  # one that had run when the consumer started
                producers = [p for p in producers
                             if p["started_at"] <= consumer["started_at"]] or producers
            return producers[0] if producers else None

        return {"kind": "artifact", "root": ref,
                "nodes": [_node(ref, None, any_producer(None, ref), any_producer, {})]}
    try:
        rec = meta.get_run(ref)
    except NotFoundError:
        raise NotFoundError(f"no run or artifact {ref!r}; give a run id (or a prefix) or a "
                            "full 64-character artifact hash.") from None
    steps = meta.get_step_runs(rec.id)
    position = {st["id"]: i for i, st in enumerate(steps)}

    def earlier_producer(consumer: dict[str, Any] | None, h: str) -> dict[str, Any] | None:
        # the latest earlier step of the run: a step that passes its input through
        # unchanged is then not its own producer
        end = position[consumer["id"]] if consumer is not None else len(steps)
        return next((st for st in reversed(steps[:end])
                     if any(o["hash"] == h for o in st["outputs"])), None)

    consumed = {i["hash"] for st in steps for i in st["inputs"]}
    seen: dict[str, Any] = {}
    roots = [_node(o["hash"], o["name"], st, earlier_producer, seen)
             for st in steps for o in st["outputs"] if o["hash"] not in consumed]
    return {"kind": "run", "root": rec.id, "pipeline": rec.tags.get("reprise.pipeline"),
            "nodes": roots}


Producer = Callable[[dict[str, Any] | None, str], dict[str, Any] | None]


def _node(h: str, name: str | None, st: dict[str, Any] | None, producer: Producer,
          seen: dict[str, Any]) -> dict[str, Any]:
    """Artifact ``h`` as output of step run ``st`` (None: no recorded producer),
    with that step's inputs resolved by ``producer`` down to the raw files."""
    node: dict[str, Any] = {"hash": h, "name": name, "kind": "artifact"}
    if st is None:
        return node
    key = f"{st['id']}:{h}"
    if key in seen:
        return {**node, "repeated": True, "produced_by": seen[key]}
    info = seen[key] = {"step": st["step_name"], "step_run": st["id"], "run": st["run_id"],
                        "status": st["status"], "cache_key": st["cache_key"]}
    inputs = [{"hash": x["hash"], "name": x["name"], "kind": "input", "source": x["source"]}
              if x.get("source") is not None
              else _node(x["hash"], x["name"], producer(st, x["hash"]), producer, seen)
              for x in st["inputs"]]
    return {**node, "produced_by": {**info, "inputs": inputs}}


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
