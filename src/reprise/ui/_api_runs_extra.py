"""What the runs page needs beside the runs table (``_api_runs``): the nested runs under
some runs (a study's trials, a trial's pipeline run), each with how many runs nest under it
in turn, and a pipeline run's steps, so that the page folds them under their parent."""

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
_STEP_FIELDS = ("id", "step_name", "status", "reused_from", "started_at", "ended_at",
                "duration")


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Query

    router = APIRouter(tags=["runs"])

    @router.get("/api/run-children", summary="The runs nested under some runs, oldest first, "
                "each with its own number of nested runs; and some pipeline runs' steps")
    def run_children(
        ids: str = Query(..., description="Parent run ids (full ids), comma-separated: up to "
                         f"{MAX_PARENTS}."),
        steps: str | None = Query(None, description="Some of these ids, comma-separated, "
                                  "whose pipeline steps to list too (in `steps`)."),
    ) -> dict[str, Any]:
        from reprise.store._metadata_base import RunFilter
        from reprise.tracking import run_dict

        parents = [i.strip() for i in ids.split(",") if i.strip()]
        if not parents:
            raise UserError("give the parent run ids (ids=a,b).")
        if len(parents) > MAX_PARENTS:
            raise UserError(f"at most {MAX_PARENTS} parents at once, not {len(parents)}.")
        with_steps = [i.strip() for i in (steps or "").split(",") if i.strip()]
        stray = sorted(set(with_steps) - set(parents))
        if stray:
            raise UserError(f"steps names {', '.join(map(repr, stray))}, which ids does not; "
                            "give steps among ids.")
        ctx.fresh()
        # a query per parent and per child (for its own count), on the store's parent_id
        # index: a page's parents mostly have no children, and listing every run to group
        # them would cost as much as the whole table
        store = ctx.store
        kids = {p: sorted(store.list_runs(RunFilter(parent_id=p)),
                          key=lambda r: (r.started_at, r.id)) for p in dict.fromkeys(parents)}
        flat = [r for rs in kids.values() for r in rs]
        latest = store.latest_metrics([r.id for r in flat])
        children: dict[str, list[dict[str, Any]]] = {}
        for p, rs in kids.items():
            children[p] = []
            for r in rs:
                d = run_dict(r, latest[r.id])
                row = {k: d[k] for k in _ROW_FIELDS}
                row["children"] = len(store.list_runs(RunFilter(parent_id=r.id)))
                children[p].append(row)
        step_rows = {p: [{k: st.get(k) for k in _STEP_FIELDS} for st in store.get_step_runs(p)]
                     for p in dict.fromkeys(with_steps)}  # an unknown run: 404 naming it
        answer: dict[str, Any] = clean({"children": children, "steps": step_rows})
        return answer

    return router
