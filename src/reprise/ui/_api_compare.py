"""The compare part of the dashboard's API: 2..N runs side by side (params, final
metrics, the metrics all of them logged, environment and step-output differences),
each computed by the layers' own functions (``tracking.describe_run``, the store's step
runs, ``env.diff_environments``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reprise.core.errors import UserError
from reprise.ui._context import UiContext, clean

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["MAX_RUNS", "router"]

MAX_RUNS = 20
# the environment's sections that are compared; env_vars stay out (they may hold secrets)
_ENV_SECTIONS = ("python", "packages", "os", "cpu", "gpu", "cuda", "git")
_HEAD = ("id", "name", "kind", "status", "parent_id", "started_at", "ended_at", "duration",
         "env_hash", "code_hash", "git_commit")


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Query

    router = APIRouter(tags=["compare"])

    @router.get("/api/compare", summary="2..N runs side by side: params, final metrics, "
                "common metrics, environment and output differences")
    def compare(
        ids: str = Query(..., description="Run ids (or unique prefixes), comma-separated: "
                         f"2 to {MAX_RUNS}."),
    ) -> dict[str, Any]:
        wanted = parse_ids(ids)
        ctx.fresh()
        runs = [_describe(ctx, i) for i in wanted]
        if len({r["id"] for r in runs}) < len(runs):
            raise UserError("the same run is given twice; compare different runs.")
        answer: dict[str, Any] = clean({
            "runs": [{k: r.get(k) for k in _HEAD} for r in runs],
            "params": _side_by_side([r["params"] for r in runs]),
            "metrics": _side_by_side([r["metrics"] for r in runs]),
            "common_metrics": sorted(set.intersection(*(set(r["metrics"]) for r in runs))),
            "environment": _environment(ctx, runs),
            "outputs": _side_by_side([_outputs(ctx, r) for r in runs]),
        })
        return answer

    return router


def parse_ids(text: str) -> list[str]:
    """The run ids of ``?ids=a,b,c`` (blanks dropped).

    Raises:
        UserError: fewer than two ids, or more than :data:`MAX_RUNS`.
    """
    ids = [i.strip() for i in text.split(",") if i.strip()]
    if len(ids) < 2:
        raise UserError(f"give at least two run ids to compare (ids=a,b), not {len(ids)}.")
    if len(ids) > MAX_RUNS:
        raise UserError(f"at most {MAX_RUNS} runs can be compared at once, not {len(ids)}.")
    return ids


def _describe(ctx: UiContext, run_id: str) -> dict[str, Any]:
    from reprise.tracking import describe_run

    out: dict[str, Any] = describe_run(ctx.workspace, run_id)  # 404 naming the id
    return out


def _side_by_side(maps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per key of any map: its value in each (None where absent), and whether
    they differ."""
    keys = sorted(set().union(*maps))
    rows = []
    for key in keys:
        values = [m.get(key) for m in maps]
        rows.append({"key": key, "values": values,
                     "differs": any(v != values[0] for v in values[1:])})
    return rows


def _outputs(ctx: UiContext, run: dict[str, Any]) -> dict[str, Any]:
    """Content hashes a run produced: its step runs' outputs (``step/output``) and its
    logged artifacts (``artifact:NAME``)."""
    out: dict[str, Any] = {}
    for st in ctx.store.get_step_runs(run["id"]):
        for edge in st.get("outputs") or ():
            out[f"{st['step_name']}/{edge['name']}"] = edge["hash"]
    for name, art in (run.get("artifacts") or {}).items():
        out[f"artifact:{name}"] = art["hash"]
    return out


def _environment(ctx: UiContext, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each run's Python, and the environment entries (section, key) that differ between
    the runs, with every run's value: ``env.diff_environments`` of each run against the
    first one recorded (a run without a recorded environment has None everywhere)."""
    from reprise.env import diff_environments

    prints = [_fingerprint(ctx, r.get("env_hash")) for r in runs]
    recorded = [i for i, fp in enumerate(prints) if fp is not None]
    base_i = recorded[0] if recorded else 0
    base: dict[tuple[str, str], Any] = {}
    changed: dict[tuple[str, str], dict[int, Any]] = {}
    for i in recorded[1:]:
        for c in diff_environments(prints[base_i] or {}, prints[i] or {}):
            base[(c.section, c.key)] = c.old
            changed.setdefault((c.section, c.key), {})[i] = c.new
    differs = []
    for entry, news in sorted(changed.items()):
        values = [None if prints[i] is None else base[entry] if i == base_i
                  else news.get(i, base[entry]) for i in range(len(runs))]
        differs.append({"section": entry[0], "key": entry[1], "values": values})
    return {"hashes": [r.get("env_hash") for r in runs],
            "recorded": [p is not None for p in prints],
            "python": [_python(p) for p in prints], "differs": differs}


def _fingerprint(ctx: UiContext, env_hash: str | None) -> dict[str, Any] | None:
    """The compared sections of a recorded environment; None when there is none."""
    from reprise.core.errors import NotFoundError

    if not env_hash:
        return None
    try:
        fp = ctx.store.get_environment(env_hash)
    except NotFoundError:
        return None
    return {k: fp[k] for k in _ENV_SECTIONS if k in fp}


def _python(fp: dict[str, Any] | None) -> str | None:
    py = (fp or {}).get("python")
    if isinstance(py, dict):
        version = py.get("version")
        return str(version) if version is not None else None
    return str(py) if py is not None else None
