"""The monitoring part of the dashboard's API: what ``reprise.monitor`` stored for a served
model version: its live windows (each column's drift statistics, the verdicts and the
alarms raised on them, the store's ``monitor_windows``), and what the closed loop did
about the alarms (the ``monitor.*`` audit events of the model's aliases: alarm, action
started, succeeded, failed or skipped: rollback, retrain, notify)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reprise.core.errors import NotFoundError, UserError
from reprise.ui._context import UiContext, clean

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["router"]

_PARTS = ("input", "prediction")
_EVIDENCE = ("method", "statistic", "p_value", "p_adjusted", "threshold", "missing_rate")


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Query

    router = APIRouter(tags=["monitoring"])

    @router.get("/api/monitoring", summary="Monitored model versions: drift per column over "
                "time, the alarms and the actions they triggered")
    def monitoring(
        model: str | None = Query(None, description="The model (default: the one whose "
                                  "newest window is the newest)."),
        version: int | None = Query(None, ge=1, description="Its version (default: the "
                                    "version with the newest window)."),
        limit: int = Query(200, ge=1, le=5000, description="The newest windows kept."),
    ) -> dict[str, Any]:
        if model is not None and not ctx.store.list_model_versions(model):
            raise NotFoundError(f"no model named {model!r} in this workspace")
        if version is not None and model is None:
            raise UserError("version needs model (e.g. ?model=churn&version=3)")
        if model is not None and version is not None \
                and ctx.store.get_model_version(model, version) is None:
            raise NotFoundError(f"model {model!r} has no version {version}")
        latest = sorted(ctx.store.latest_monitor_windows(), key=lambda w: -w.end)
        monitored = [{"model": w.name, "version": w.version, "newest_end": w.end}
                     for w in latest]
        if model is None and latest:
            model, version = latest[0].name, latest[0].version
        elif model is not None and version is None:
            version = next((w.version for w in latest if w.name == model), None)
        windows = [] if model is None or version is None else \
            ctx.store.list_monitor_windows(model, version=version, limit=limit)
        windows = sorted(windows, key=lambda w: w.end)  # oldest first: a chart's x
        answer: dict[str, Any] = clean({
            "monitored": monitored, "model": model, "version": version,
            "reference": (windows[-1].summary or {}).get("reference") if windows else None,
            "windows": [_window(w) for w in windows],
            "drift": {part: _series(windows, part) for part in _PARTS},
            "alarms": _alarms(windows),
            "events": _events(ctx, model) if model is not None else []})
        return answer

    return router


def _window(w: Any) -> dict[str, Any]:
    s = w.summary or {}
    return {"id": w.id, "start": w.start, "end": w.end, "rows": w.rows,
            "labelled": w.labelled, "computed_at": w.computed_at,
            "verdicts": {"input_drift": w.input_verdict,
                         "prediction_drift": w.prediction_verdict,
                         "performance": w.performance_verdict},
            "drifted": {part: (s.get(part) or {}).get("drifted") or [] for part in _PARTS},
            "alarms": [a.get("id") for a in s.get("alarms") or []]}


def _series(windows: list[Any], part: str) -> dict[str, dict[str, Any]]:
    """Per column, one point per window (at the window's end): the test's statistic,
    p-values and verdict, and the Jensen-Shannon distance (0..1 whatever the column's
    kind, so that columns compare on one axis)."""
    out: dict[str, dict[str, Any]] = {}
    for w in windows:
        for c in ((w.summary or {}).get(part) or {}).get("columns") or []:
            name = str(c.get("column"))
            col = out.setdefault(name, {"kind": c.get("kind"), "time": [], "verdict": [],
                                        "js": [], **{k: [] for k in _EVIDENCE}})
            col["time"].append(w.end)
            col["verdict"].append(c.get("verdict"))
            effect = c.get("effect") if isinstance(c.get("effect"), dict) else {}
            col["js"].append(effect.get("js"))
            for k in _EVIDENCE:
                col[k].append(c.get(k))
    return out


def _alarms(windows: list[Any]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for w in windows:
        for a in (w.summary or {}).get("alarms") or []:
            seen.setdefault(str(a.get("id")), {k: a.get(k) for k in (
                "id", "kind", "message", "model", "version", "alias", "window",
                "raised_at")})
    return sorted(seen.values(), key=lambda a: a.get("raised_at") or 0.0)


def _events(ctx: UiContext, model: str) -> list[dict[str, Any]]:
    """The closed loop's record on each alias of ``model``: alarms and the actions they
    started, with their outcome."""
    out = []
    for alias in sorted(ctx.store.get_aliases(model)):
        for e in ctx.store.subject_events(f"{model}@{alias}", "monitor."):
            p = e.payload or {}
            out.append({"seq": e.seq, "time": e.time, "actor": e.actor, "action": e.action,
                        "subject": e.subject, "alarm": p.get("alarm"), "kind": p.get("kind"),
                        "do": p.get("action"), "message": p.get("message"),
                        "reason": p.get("reason"), "error": p.get("error"),
                        "result": p.get("result"), "started_seq": p.get("started_seq")})
    return sorted(out, key=lambda e: e["seq"])
