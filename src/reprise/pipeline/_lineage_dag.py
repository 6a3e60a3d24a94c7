"""The lineage tree of ``reprise lineage`` as a DAG: each step run once, in topological
order, with its inputs (the step and output each came from, or the raw file) and its
outputs. The tree repeats every shared ancestor under each consumer; this view prints
each artifact once."""

from __future__ import annotations

import heapq
from typing import Any

__all__ = ["lineage_steps"]


def lineage_steps(ws: Any, tree: dict[str, Any]) -> list[dict[str, Any]]:
    """The step runs of ``tree`` (from :func:`reprise.pipeline._lineage.lineage`), producers
    before consumers (ties in recorded order), each as ``{"step", "step_run", "run",
    "status", "inputs": [...], "outputs": [...]}``.

    An input is ``{"name", "hash"}`` plus ``"source"`` for a raw file, or ``"from_step"``,
    ``"from_step_run"`` and ``"from_output"`` for a step's output (neither when no
    producer was recorded). An output is ``{"name", "hash", "final"}``; ``final`` marks
    the artifacts the tree starts from.
    """
    steps: dict[str, dict[str, Any]] = {}
    for node in tree["nodes"]:
        _collect(node, steps)
    recorded = _recorded_steps(ws, {s["run"] for s in steps.values()})
    finals = {n["hash"] for n in tree["nodes"]}
    order = {sid: i for i, sid in enumerate(recorded)}
    for sid, st in steps.items():
        outputs = recorded.get(sid, {}).get("outputs") or []
        st["outputs"] = [{"name": o["name"], "hash": o["hash"], "final": o["hash"] in finals}
                         for o in outputs]
        for i in st["inputs"]:
            if i.get("from_step_run") is not None:
                i["from_output"] = _output_name(recorded.get(i["from_step_run"]), i["hash"])
    return [steps[sid] for sid in _topological(steps, order)]


def _collect(node: dict[str, Any], steps: dict[str, dict[str, Any]]) -> None:
    prod = node.get("produced_by")
    if not prod or "inputs" not in prod:  # a raw file, no producer, or shown already
        return
    sid = prod["step_run"]
    if sid in steps:
        return
    inputs = []
    for i in prod["inputs"]:
        entry: dict[str, Any] = {"name": i.get("name"), "hash": i["hash"]}
        if i.get("kind") == "input":
            entry["source"] = i["source"]
        elif i.get("produced_by"):
            entry["from_step"] = i["produced_by"]["step"]
            entry["from_step_run"] = i["produced_by"]["step_run"]
        inputs.append(entry)
    steps[sid] = {"step": prod["step"], "step_run": sid, "run": prod["run"],
                  "status": prod["status"], "inputs": inputs, "outputs": []}
    for i in prod["inputs"]:
        _collect(i, steps)


def _recorded_steps(ws: Any, runs: set[str]) -> dict[str, dict[str, Any]]:
    """Step runs as recorded (outputs with their names), by id, in recorded order."""
    out: dict[str, dict[str, Any]] = {}
    for run in sorted(runs):
        for st in ws.metadata.get_step_runs(run):
            out[st["id"]] = st
    return out


def _output_name(producer: dict[str, Any] | None, h: str) -> str | None:
    if producer is None:
        return None
    outputs = producer.get("outputs") or []
    return next((o["name"] for o in outputs if o["hash"] == h), None)


def _topological(steps: dict[str, dict[str, Any]], order: dict[str, int]) -> list[str]:
    """Kahn's algorithm, always taking the earliest-recorded ready step next."""
    needs = {sid: {i["from_step_run"] for i in st["inputs"]
                   if i.get("from_step_run") in steps and i["from_step_run"] != sid}
             for sid, st in steps.items()}
    users: dict[str, list[str]] = {sid: [] for sid in steps}
    for sid, deps in needs.items():
        for dep in deps:
            users[dep].append(sid)
    key = {sid: (order.get(sid, len(order)), sid) for sid in steps}
    ready = [key[sid] for sid, deps in needs.items() if not deps]
    heapq.heapify(ready)
    out: list[str] = []
    while ready:
        sid = heapq.heappop(ready)[1]
        out.append(sid)
        for user in users[sid]:
            needs[user].discard(sid)
            if not needs[user]:
                heapq.heappush(ready, key[user])
    if len(out) != len(steps):  # a cycle cannot be recorded; show the rest as recorded
        out += sorted((sid for sid in steps if sid not in out), key=key.__getitem__)
    return out
