"""What the runs page needs beside the runs table (``_api_runs``): the nested runs under
some runs (a pipeline's trials, a study's trials), each with how many runs nest under it
in turn, so that the page folds them under their parent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reprise.core.errors import UserError
from reprise.ui._context import UiContext, clean

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["MAX_PARENTS", "router"]

MAX_PARENTS = 1000
_ROW_FIELDS = ("id", "name", "kind", "status", "parent_id", "started_at", "ended_at",
               "duration", "tags", "params", "metrics")


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Query

    router = APIRouter(tags=["runs"])

    @router.get("/api/run-children", summary="The runs nested under some runs, oldest first, "
                "each with its own number of nested runs")
    def run_children(
        ids: str = Query(..., description="Parent run ids (full ids), comma-separated: up to "
                         f"{MAX_PARENTS}."),
    ) -> dict[str, Any]:
        from reprise.store._metadata_base import RunFilter
        from reprise.tracking import run_dict

        parents = [i.strip() for i in ids.split(",") if i.strip()]
        if not parents:
            raise UserError("give the parent run ids (ids=a,b).")
        if len(parents) > MAX_PARENTS:
            raise UserError(f"at most {MAX_PARENTS} parents at once, not {len(parents)}.")
        ctx.fresh()
        # one listing of every run, grouped by parent: a query per parent (and per child,
        # for its own count) would cost more round trips than rows
        records = ctx.store.list_runs(RunFilter(ascending=True))
        counts: dict[str, int] = {}
        for r in records:
            if r.parent_id is not None:
                counts[r.parent_id] = counts.get(r.parent_id, 0) + 1
        wanted = set(parents)
        kids = sorted((r for r in records if r.parent_id in wanted),
                      key=lambda r: (r.started_at, r.id))
        latest = ctx.store.latest_metrics([r.id for r in kids])
        children: dict[str, list[dict[str, Any]]] = {p: [] for p in parents}
        for r in kids:
            d = run_dict(r, latest[r.id])
            row = {k: d[k] for k in _ROW_FIELDS}
            row["children"] = counts.get(r.id, 0)
            children[str(r.parent_id)].append(row)
        answer: dict[str, Any] = clean({"children": children})
        return answer

    return router
