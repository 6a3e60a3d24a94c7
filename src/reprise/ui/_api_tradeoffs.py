"""The trade-offs part of the dashboard's API: for a model's versions (and a study's
trials), a quality metric against p99 latency, cost per 1,000 predictions and the energy
of the training, each figure from where it is recorded, or ``null`` (not measured):

- the metric: a version's evaluation (its card's headline metrics, as registered); a
  trial's run metric of that name (``KEY`` or ``.../KEY``);
- latency (p50, p99): the version's newest rollout window with requests (the per-version
  outcome buckets servers flush, ``reprise.serve.rollout_windows``), else its request
  log (``reprise serve --request-log``; one latency per request); a trial is never served;
- energy per training: the producing run's ``energy_joules`` (the runner's meter: RAPL,
  NVML or an estimate, whose source is given);
- cost per 1,000 predictions: computed, not recorded: ``usd_per_hour`` x 1,000 x p50
  latency / 3,600 s, the cost of one worker answering one request at a time (batching
  lowers it), from the query's $/hour (default :data:`DEFAULT_USD_PER_HOUR`)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from reprise.core.errors import NotFoundError, UserError
from reprise.ui._context import UiContext, clean

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["DEFAULT_USD_PER_HOUR", "router"]

DEFAULT_USD_PER_HOUR = 1.0
_LOG_CHUNKS = 20  # the request log's newest chunks read for a version's latency


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Query

    router = APIRouter(tags=["trade-offs"])

    @router.get("/api/tradeoffs", summary="Versions and trials: a metric against p99 "
                "latency, cost per 1,000 predictions and energy per training")
    def tradeoffs(
        model: str | None = Query(None, description="The model whose versions are shown "
                                  "(default: every model's, unless a study is given)."),
        study: str | None = Query(None, description="A tuning study whose trials are shown."),
        metric: str = Query("accuracy", min_length=1, max_length=200,
                            description="The quality metric (a version's evaluation metric; "
                            "a trial's run metric KEY or .../KEY)."),
        usd_per_hour: float = Query(DEFAULT_USD_PER_HOUR, description="The price of one "
                                    "serving worker per hour, in dollars: cost per 1,000 "
                                    "predictions = usd_per_hour x 1000 x p50 latency / 3600 s "
                                    "(one request at a time)."),
    ) -> dict[str, Any]:
        if not math.isfinite(usd_per_hour) or usd_per_hour < 0:
            raise UserError(f"usd_per_hour must be a finite number >= 0; got {usd_per_hour}")
        if model is not None and not ctx.store.list_model_versions(model):
            raise NotFoundError(f"no model named {model!r} in this workspace")
        points: list[dict[str, Any]] = []
        if model is not None or study is None:
            for v in ctx.store.list_model_versions(model):
                points.append(_version_point(ctx, v, metric, usd_per_hour))
        if study is not None:
            points.extend(_trial_points(ctx, study, metric))
        from reprise.registry._registry import list_models
        from reprise.tune import list_studies

        answer: dict[str, Any] = clean({
            "metric": metric, "usd_per_hour": usd_per_hour,
            "cost_formula": "usd_per_hour x 1000 x p50 latency / 3600 s (one worker "
                            "answering one request at a time)",
            "models": [m["name"] for m in list_models(ctx.workspace)],
            "studies": [s["study"] for s in list_studies(ctx.workspace)],
            "metrics_available": _available(points), "model": model, "study": study,
            "points": points})
        return answer

    return router


def _version_point(ctx: UiContext, v: Any, metric: str, usd_per_hour: float) -> dict[str, Any]:
    headline = (v.metrics or {}).get("metrics") or {}
    m = headline.get(metric)
    value = m.get("value") if isinstance(m, dict) else m
    latency = _latency(ctx, v)
    energy, source = _energy(ctx, v.run_id)
    p50 = latency["p50_ms"] if latency else None
    return {"kind": "version", "label": v.ref, "metrics_available": sorted(headline),
            "model": v.name, "version": v.version,
            "run_id": v.run_id, "metric": value if isinstance(value, int | float) else None,
            "metric_source": "evaluation" if value is not None else None,
            "p50_ms": p50, "p99_ms": latency["p99_ms"] if latency else None,
            "requests": latency["requests"] if latency else None,
            "latency_source": latency["source"] if latency else None,
            "cost_per_1k": None if p50 is None else usd_per_hour * 1000 * p50 / 1000 / 3600,
            "energy_joules": energy, "energy_source": source,
            "gates_passed": (v.metrics or {}).get("gates_passed")}


def _number(point: Any) -> float | None:
    value = getattr(point, "value", point)
    return float(value) if isinstance(value, int | float) else None


def _available(points: list[dict[str, Any]]) -> list[str]:
    """The metric names a point has (a trial's keys by their last part)."""
    return sorted({k for p in points for k in p.pop("metrics_available")})


def _latency(ctx: UiContext, v: Any) -> dict[str, Any] | None:
    """The newest measured latency of a version: a rollout window, else its request log."""
    from reprise.serve._rollouts import rollout_windows

    for rec in ctx.store.list_rollouts(v.name):  # newest first
        if v.version not in (rec.stable, rec.candidate):
            continue
        stable, cand = rollout_windows(ctx.store, rec, rec.ended_at or time.time())
        w = stable if v.version == rec.stable else cand
        if w.requests:
            return {"p50_ms": w.quantile(0.5), "p99_ms": w.quantile(0.99),
                    "requests": w.requests, "source": f"rollout {rec.id} (its last window)"}
    return _logged_latency(ctx, v)


def _logged_latency(ctx: UiContext, v: Any) -> dict[str, Any] | None:
    import numpy as np

    from reprise.store._request_log import read_request_chunk

    chunks = ctx.store.list_request_chunks(v.name, version=v.version)
    chunks = sorted(chunks, key=lambda c: c.last_at)[-_LOG_CHUNKS:]
    values: list[float] = []
    for c in chunks:
        t = read_request_chunk(ctx.workspace, c).select(["row", "latency_ms"]).to_pydict()
        values += [ms for row, ms in zip(t["row"], t["latency_ms"], strict=True)
                   if row == 0 and ms is not None]  # one row per request
    if not values:
        return None
    a = np.asarray(values)
    return {"p50_ms": float(np.quantile(a, 0.5)), "p99_ms": float(np.quantile(a, 0.99)),
            "requests": len(values), "source": f"request log ({len(values)} requests)"}


def _energy(ctx: UiContext, run_id: str | None) -> tuple[float | None, str | None]:
    if run_id is None:
        return None, None
    try:
        rec = ctx.store.get_run(run_id)
    except NotFoundError:
        return None, None
    joules = getattr(rec, "energy_joules", None)
    return (joules, getattr(rec, "energy_source", None)) if joules is not None else (None, None)


def _trial_points(ctx: UiContext, study: str, metric: str) -> list[dict[str, Any]]:
    from reprise.tune import describe_study, load_study

    info = describe_study(load_study(ctx.workspace, study))
    runs = [t["run_id"] for t in info["trials"] if t.get("run_id")]
    latest = ctx.store.latest_metrics(runs) if runs else {}
    out = []
    for t in info["trials"]:
        rid = t.get("run_id")
        metrics = latest.get(rid, {}) if rid else {}
        key = metric if metric in metrics else next(
            (k for k in sorted(metrics) if k.endswith("/" + metric)), None)
        energy, source = _energy(ctx, rid)
        names = sorted({k.rsplit("/", 1)[-1] for k in metrics})
        out.append({"kind": "trial", "metrics_available": names,
                    "label": f"{study} #{t['number']}", "study": study,
                    "trial": t["number"], "state": t["state"], "run_id": rid,
                    "objective": t.get("value"),
                    "metric": _number(metrics.get(key)) if key else None,
                    "metric_source": key,
                    "p50_ms": None, "p99_ms": None, "requests": None, "latency_source": None,
                    "cost_per_1k": None, "energy_joules": energy, "energy_source": source})
    return out
