"""The runs part of the dashboard's API: the runs table (filter, sort, page), one run
(params, metrics, tags, environment, error, steps) and one metric's series downsampled."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from reprise.core.errors import NotFoundError, UserError
from reprise.ui._context import UiContext, clean
from reprise.ui._downsample import MIN_POINTS, downsample_minmax
from reprise.ui._query import (
    Node,
    matches,
    parse_query,
    pushdown,
    sort_field,
    sort_runs,
    to_condition,
)

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["router"]

_TABLE_FIELDS = ("id", "name", "kind", "status", "parent_id", "started_at", "ended_at",
                 "duration", "tags", "params", "metrics")
_ENV_SECTIONS = ("python", "os", "cpu", "memory", "gpu", "cuda", "git")


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Query

    router = APIRouter(tags=["runs"])

    @router.get("/api/runs", summary="The runs table: filter, sort, page")
    def runs(
        q: str | None = Query(None, description='e.g. metrics.f1 > 0.9 and params.lr < 0.01 '
                              'and status = "finished" and tags.team = "x"'),
        sort: str = Query("-started_at", description="A column (id, name, status, "
                          "started_at, metrics.KEY, params.KEY, tags.KEY...); '-' first: "
                          "descending."),
        limit: int = Query(100, ge=1, le=1000),
        offset: int = Query(0, ge=0),
        top_level: bool = Query(False, description="Only runs without a parent."),
    ) -> dict[str, Any]:
        from reprise.store._run_search import RunSearch
        from reprise.tracking import run_dict

        node: Node | None = parse_query(q) if q and q.strip() else None
        field, descending = sort_field(sort)  # an unknown column is a 400 before any work
        ctx.fresh()
        # filter, sort, count and page in the store's SQL; only the page becomes dicts
        found = ctx.store.search_runs(RunSearch(
            where=None if node is None else to_condition(node), sort=field,
            descending=descending, limit=limit, offset=offset, top_level=top_level))
        if found is None:
            return _python_page(node, sort, limit, offset, top_level)
        rows = [{k: d[k] for k in _TABLE_FIELDS}
                for d in (run_dict(r, found.latest.get(r.id, {})) for r in found.runs)]
        page: dict[str, Any] = clean({"total": found.total, "offset": offset,
                                       "limit": limit, "runs": rows})
        return page

    def _python_page(node: Node | None, sort: str, limit: int, offset: int,
                     top_level: bool) -> dict[str, Any]:
        """The same page computed in Python over every matching run, for a store that
        cannot search (or a sort it cannot do exactly: a param holding lists)."""
        from reprise.core._types import RunStatus
        from reprise.store._metadata_base import RunFilter
        from reprise.tracking import run_dict

        pushed = pushdown(node)
        status = pushed.get("status")
        records = ctx.store.list_runs(RunFilter(
            name=pushed.get("name"), status=status if isinstance(status, RunStatus) else None,
            tags=pushed.get("tags"), top_level=top_level))
        latest = ctx.store.latest_metrics([r.id for r in records])
        rows = [{k: d[k] for k in _TABLE_FIELDS}
                for d in (run_dict(r, latest[r.id]) for r in records)]
        if node is not None:
            rows = [r for r in rows if matches(node, r)]
        rows = sort_runs(rows, sort)
        page: dict[str, Any] = clean({"total": len(rows), "offset": offset,
                                       "limit": limit, "runs": rows[offset:offset + limit]})
        return page

    @router.get("/api/runs/{run_id}", summary="One run: params, metrics, tags, environment, "
             "error, steps")
    def run(run_id: str) -> dict[str, Any]:
        from reprise.tracking import describe_run

        ctx.fresh()
        out = describe_run(ctx.workspace, run_id)
        out["environment"] = _environment(out.get("env_hash"))
        out["steps"] = ctx.store.get_step_runs(out["id"])
        answer: dict[str, Any] = clean(out)
        return answer

    def _environment(env_hash: str | None) -> dict[str, Any] | None:
        if env_hash is None:
            return None
        try:
            fp = ctx.store.get_environment(env_hash)
        except NotFoundError:
            return None
        summary = {k: fp[k] for k in _ENV_SECTIONS if k in fp}
        summary["hash"] = env_hash
        summary["packages_count"] = len(fp.get("packages") or {})
        return summary

    @router.get("/api/runs/{run_id}/metrics/{key:path}",
             summary="One metric's series, downsampled keeping extremes")
    def metric(
        run_id: str, key: str,
        max_points: int = Query(2000, ge=MIN_POINTS, le=100_000),
        x: str = Query("step", pattern="^(step|time)$"),
        start: float | None = Query(None, description="Smallest x kept (zoom)."),
        end: float | None = Query(None, description="Largest x kept (zoom)."),
    ) -> dict[str, Any]:
        if start is not None and end is not None and start > end:
            raise UserError(f"start ({start}) is after end ({end}).")
        ctx.fresh()
        rec = ctx.store.get_run(run_id)
        series = ctx.store.metric_series(rec.id, key, x=x, start=start, end=end,
                                         max_points=max_points)
        if series is None:
            return _python_series(rec.id, key, x, start, end, max_points)
        if series.total == 0:
            raise NotFoundError(f"run {rec.id} has no metric {key!r}.")
        return {"run_id": rec.id, "key": key, "x": x, "total_points": series.total,
                "in_range": series.in_range, "non_finite": series.non_finite,
                "downsampled": series.downsampled, "xs": series.xs, "ys": series.ys}

    def _python_series(run_id: str, key: str, x: str, start: float | None,
                       end: float | None, max_points: int) -> dict[str, Any]:
        """The series reduced in Python from every point, for a store that cannot."""
        points = ctx.store.get_metrics(run_id, key)
        if not points:
            raise NotFoundError(f"run {run_id} has no metric {key!r}.")
        pts = [(p.step if x == "step" else p.timestamp, p.value) for p in points]
        pts.sort(key=lambda p: p[0])  # by time, steps may come out of order
        total = len(pts)
        pts = [p for p in pts if (start is None or p[0] >= start)
               and (end is None or p[0] <= end)]
        finite = [p for p in pts if math.isfinite(p[1])]
        keep = downsample_minmax([p[0] for p in finite], [p[1] for p in finite], max_points)
        return {"run_id": run_id, "key": key, "x": x, "total_points": total,
                "in_range": len(pts), "non_finite": len(pts) - len(finite),
                "downsampled": len(keep) < len(finite),
                "xs": [finite[i][0] for i in keep], "ys": [finite[i][1] for i in keep]}

    return router
