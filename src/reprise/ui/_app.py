"""The dashboard's JSON API: a FastAPI app over a workspace, read-only, thin (every
answer comes from ``reprise.tracking`` and the store's read methods)."""

from __future__ import annotations

import hmac
import math
import os
import threading
from typing import TYPE_CHECKING, Any

from reprise.core.errors import NotFoundError, UserError
from reprise.ui._downsample import MIN_POINTS, downsample_minmax
from reprise.ui._query import Node, matches, parse_query, pushdown, sort_runs

if TYPE_CHECKING:
    from fastapi import FastAPI

    from reprise.store._workspace import Workspace

__all__ = ["TOKEN_ENV", "create_app"]

TOKEN_ENV = "REPRISE_UI_TOKEN"
_TABLE_FIELDS = ("id", "name", "kind", "status", "parent_id", "started_at", "ended_at",
                 "duration", "tags", "params", "metrics")
_ENV_SECTIONS = ("python", "os", "cpu", "memory", "gpu", "cuda", "git")


def _clean(value: Any) -> Any:
    """JSON cannot carry NaN or infinities: they become null (a chart's gap)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def create_app(workspace: Workspace, token: str | None = None,
               allow_actions: bool = False) -> FastAPI:
    """The dashboard app over ``workspace``. With ``token`` (else ``REPRISE_UI_TOKEN``;
    empty: none) every ``/api`` request needs ``Authorization: Bearer TOKEN`` (401).
    ``allow_actions`` is recorded for the actions to come (promote, rollback, abort);
    this API has none yet, so it is read-only either way.

    Example:
        >>> from fastapi.testclient import TestClient  # doctest: +SKIP
        >>> TestClient(create_app(open_workspace())).get("/api/health").json()  # doctest: +SKIP
        {'status': 'ok', ...}
    """
    from fastapi import FastAPI, Query, Request
    from fastapi.responses import JSONResponse, Response

    secret = token if token is not None else os.environ.get(TOKEN_ENV, "")
    expected = f"Bearer {secret}".encode() if secret else None
    store = workspace.metadata  # SQLAlchemy: shared safely by the server's threads
    recovering = threading.Lock()

    def fresh() -> None:
        """Catch up the journals of live runs (and recover dead writers' ones), as every
        CLI command does, so that running runs show their latest rows. One thread at a
        time: journal locks are per process, so two threads would not exclude each other."""
        with recovering:
            workspace.recover()
    # no /docs or /redoc: FastAPI's pages load Swagger/ReDoc from a CDN, and the dashboard
    # fetches nothing at run time; the schema itself is at /openapi.json
    app = FastAPI(title="Reprise dashboard API", version="1", docs_url=None, redoc_url=None,
                  description="Runs, their metrics and steps, read from a Reprise workspace.")

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Response:
        if expected is not None and request.url.path.startswith("/api"):
            given = request.headers.get("authorization", "").encode()
            # compare_digest: the time taken does not reveal how much of the token matched
            if not hmac.compare_digest(given, expected):
                return JSONResponse({"detail": "a bearer token is required "
                                     "(Authorization: Bearer TOKEN)."}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
        response: Response = await call_next(request)
        return response

    @app.exception_handler(NotFoundError)
    async def _not_found(request: Request, exc: NotFoundError) -> Response:
        return JSONResponse({"detail": str(exc).strip("'\"")}, status_code=404)

    @app.exception_handler(UserError)
    async def _bad(request: Request, exc: UserError) -> Response:
        return JSONResponse({"detail": str(exc).strip("'\"")}, status_code=400)

    @app.get("/api/health", summary="Liveness and the server's mode")
    def health() -> dict[str, Any]:
        return {"status": "ok", "workspace": str(workspace.root),
                "read_only": not allow_actions, "actions": []}

    @app.get("/api/runs", summary="The runs table: filter, sort, page")
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
        from reprise.core._types import RunStatus
        from reprise.store._metadata_base import RunFilter
        from reprise.tracking import run_dict

        node: Node | None = parse_query(q) if q and q.strip() else None
        sort_runs([], sort)  # an unknown column is a 400 before any work
        fresh()
        pushed = pushdown(node)
        status = pushed.get("status")
        records = store.list_runs(RunFilter(
            name=pushed.get("name"), status=status if isinstance(status, RunStatus) else None,
            tags=pushed.get("tags"), top_level=top_level))
        # Filtering and sorting beyond RunFilter happen here, in Python, over every
        # matching run with its final metrics: correct, not yet fast on 10,000 runs.
        latest = store.latest_metrics([r.id for r in records])
        rows = [{k: d[k] for k in _TABLE_FIELDS}
                for d in (run_dict(r, latest[r.id]) for r in records)]
        if node is not None:
            rows = [r for r in rows if matches(node, r)]
        rows = sort_runs(rows, sort)
        page: dict[str, Any] = _clean({"total": len(rows), "offset": offset,
                                       "limit": limit, "runs": rows[offset:offset + limit]})
        return page

    @app.get("/api/runs/{run_id}", summary="One run: params, metrics, tags, environment, "
             "error, steps")
    def run(run_id: str) -> dict[str, Any]:
        from reprise.tracking import describe_run

        fresh()
        out = describe_run(workspace, run_id)
        out["environment"] = _environment(out.get("env_hash"))
        out["steps"] = store.get_step_runs(out["id"])
        clean: dict[str, Any] = _clean(out)
        return clean

    def _environment(env_hash: str | None) -> dict[str, Any] | None:
        if env_hash is None:
            return None
        try:
            fp = store.get_environment(env_hash)
        except NotFoundError:
            return None
        summary = {k: fp[k] for k in _ENV_SECTIONS if k in fp}
        summary["hash"] = env_hash
        summary["packages_count"] = len(fp.get("packages") or {})
        return summary

    @app.get("/api/runs/{run_id}/metrics/{key:path}",
             summary="One metric's series, downsampled keeping extremes")
    def metric(
        run_id: str, key: str,
        max_points: int = Query(2000, ge=MIN_POINTS, le=100_000),
        x: str = Query("step", pattern="^(step|time)$"),
        start: float | None = Query(None, description="Smallest x kept (zoom)."),
        end: float | None = Query(None, description="Largest x kept (zoom)."),
    ) -> dict[str, Any]:
        fresh()
        rec = store.get_run(run_id)
        points = store.get_metrics(rec.id, key)
        if not points and key not in store.latest_metrics([rec.id])[rec.id]:
            raise NotFoundError(f"run {rec.id} has no metric {key!r}.")
        if start is not None and end is not None and start > end:
            raise UserError(f"start ({start}) is after end ({end}).")
        pts = [(p.step if x == "step" else p.timestamp, p.value) for p in points]
        pts.sort(key=lambda p: p[0])  # by time, steps may come out of order
        total = len(pts)
        pts = [p for p in pts if (start is None or p[0] >= start)
               and (end is None or p[0] <= end)]
        finite = [p for p in pts if math.isfinite(p[1])]
        keep = downsample_minmax([p[0] for p in finite], [p[1] for p in finite], max_points)
        return {"run_id": rec.id, "key": key, "x": x, "total_points": total,
                "in_range": len(pts), "non_finite": len(pts) - len(finite),
                "downsampled": len(keep) < len(finite),
                "xs": [finite[i][0] for i in keep], "ys": [finite[i][1] for i in keep]}

    return app
