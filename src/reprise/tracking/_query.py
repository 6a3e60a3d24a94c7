"""Read-side queries behind ``reprise runs`` and ``reprise env``: plain dicts, ready
to render as a table or as JSON."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from reprise.core._types import MetricPoint, RunRecord, RunStatus
from reprise.core.errors import UserError
from reprise.store._metadata_base import RunFilter
from reprise.store._workspace import Workspace

__all__ = ["compare_runs", "describe_run", "env_diff", "list_runs", "run_dict", "short_run_ids",
           "step_reads"]


def run_dict(r: RunRecord, latest: dict[str, MetricPoint] | None = None) -> dict[str, Any]:
    """A run as a JSON-able dict."""
    out: dict[str, Any] = {
        "id": r.id, "name": r.name, "kind": r.kind.value, "status": r.status.value,
        "parent_id": r.parent_id, "started_at": r.started_at, "ended_at": r.ended_at,
        "duration": r.duration, "seed": r.seed, "env_hash": r.env_hash,
        "code_hash": r.code_hash, "git_commit": r.git_commit, "git_dirty": r.git_dirty,
        "host": r.host, "user": r.user, "pid": r.pid, "error": r.error,
        "energy_joules": r.energy_joules, "energy_source": r.energy_source,
        "params": r.params, "tags": r.tags,
    }
    if latest is not None:
        out["metrics"] = {k: _num(p.value) for k, p in sorted(latest.items())}
    return out


def list_runs(
    ws: Workspace,
    *,
    name: str | None = None,
    status: str | None = None,
    tags: dict[str, str] | None = None,
    sort_metric: str | None = None,
    ascending: bool = False,
    limit: int | None = 50,
    include_children: bool = False,
) -> list[dict[str, Any]]:
    """Runs as dicts with their final metrics, newest first (or by a metric)."""
    if status is not None and status not in {s.value for s in RunStatus}:
        raise UserError(
            f"unknown status {status!r}; use one of "
            f"{', '.join(s.value for s in RunStatus)}."
        )
    flt = RunFilter(name=name, status=RunStatus(status) if status else None, tags=tags,
                    top_level=not include_children, order_by_metric=sort_metric,
                    ascending=ascending, limit=limit)
    reader = ws.reader
    records = reader.list_runs(flt)
    latest = reader.latest_metrics([r.id for r in records])
    return [run_dict(r, latest[r.id]) for r in records]


def short_run_ids(ws: Workspace, ids: list[str]) -> dict[str, str]:
    """Each id's shortest prefix (8 characters or more) that names it alone among *all*
    runs, nested ones included, so that any command taking a RUN accepts it."""
    from reprise.core._ids import shortest_unique_prefixes

    if not ids:
        return {}
    every = ws.reader.run_ids_around(min(ids), max(ids))
    short = shortest_unique_prefixes(every)
    return {i: short.get(i, i) for i in ids}


def describe_run(ws: Workspace, run_id: str) -> dict[str, Any]:
    """One run in full: fields, params, tags, final metrics, artifacts, children."""
    store = ws.reader
    rec = store.get_run(run_id)
    latest = store.latest_metrics([rec.id])[rec.id]
    out = run_dict(rec, latest)
    out["metric_steps"] = {k: p.step for k, p in sorted(latest.items())}
    out["artifacts"] = {
        name: {"hash": a.hash, "size": a.size, "kind": a.kind, "materializer": a.materializer}
        for name, a in store.run_artifacts(rec.id).items()
    }
    out["children"] = [c.id for c in store.list_runs(RunFilter(parent_id=rec.id,
                                                                ascending=True))]
    out["reads"] = step_reads(store.get_step_runs(rec.id))
    return out


def step_reads(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What each step read beyond its declared inputs (recorded by the pipeline runner's
    read watch), one row per file or variable: ``step``, ``status`` (executed/cached),
    ``kind`` (file/env), ``name``, ``digest`` (content hash or keyed value digest; None:
    absent or unset), plus a ``rerun_because`` row list for steps that re-executed
    because one of them had changed."""
    rows: list[dict[str, Any]] = []
    for st in steps:
        details = st.get("details") or {}
        reads = details.get("reads") or {}
        base = {"step": st["step_name"], "status": st["status"]}
        for path, digest in sorted((reads.get("files") or {}).items()):
            rows.append({**base, "kind": "file", "name": path, "digest": digest})
        for name, digest in sorted((reads.get("env") or {}).items()):
            rows.append({**base, "kind": "env", "name": name, "digest": digest})
        if reads.get("env_enumerated"):
            rows.append({**base, "kind": "env", "name": "*", "digest": None})
        for why in details.get("rerun_because") or ():
            rows.append({**base, "kind": "rerun", "name": why, "digest": None})
    return rows


def compare_runs(ws: Workspace, a: str, b: str) -> dict[str, Any]:
    """Params, final metrics and environment of two runs side by side."""
    ra, rb = describe_run(ws, a), describe_run(ws, b)
    params = []
    for key in sorted(set(ra["params"]) | set(rb["params"])):
        va, vb = ra["params"].get(key), rb["params"].get(key)
        params.append({"key": key, "a": va, "b": vb, "changed": va != vb})
    metrics = []
    for key in sorted(set(ra["metrics"]) | set(rb["metrics"])):
        va, vb = ra["metrics"].get(key), rb["metrics"].get(key)
        delta = vb - va if isinstance(va, float) and isinstance(vb, float) else None
        metrics.append({"key": key, "a": va, "b": vb, "delta": delta})
    return {"a": _head(ra), "b": _head(rb), "params": params, "metrics": metrics,
            "environment": env_diff(ws, ra["id"], rb["id"])}


def env_diff(ws: Workspace, a: str, b: str) -> list[dict[str, Any]]:
    """The environment changes between two runs (empty when identical)."""
    from reprise.env import diff_environments

    store = ws.metadata
    ra, rb = store.get_run(a), store.get_run(b)
    if ra.env_hash == rb.env_hash:
        return []
    if ra.env_hash is None or rb.env_hash is None:
        raise UserError("one of the runs has no recorded environment; nothing to compare.")
    changes = diff_environments(store.get_environment(ra.env_hash),
                                store.get_environment(rb.env_hash))
    return [asdict(c) for c in changes]


def _head(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("id", "name", "status", "started_at", "env_hash")}


def _num(value: float) -> float | None:
    return None if math.isnan(value) else value
