"""The rollouts part of the dashboard's API: every rollout of every model, and one
rollout's progress (the candidate's weight at each decision), each version's metrics in
the current window, the checks as they stand and every decision with its evidence.

Everything comes from ``reprise.serve``'s rollout functions and the rollout's audit
events (the decisions and the evidence they were taken on); nothing is recomputed here
but what ``reprise rollout status`` computes."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from reprise.core.errors import NotFoundError, UserError
from reprise.ui._context import UiContext, clean

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["router"]

_STATES = ("running", "promoted", "rolled_back", "aborted")


def _row(rec: Any) -> dict[str, Any]:
    return {**rec.to_dict(), "ref": rec.ref, "running": rec.running}


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Query

    router = APIRouter(tags=["rollouts"])

    @router.get("/api/rollouts", summary="Every rollout (of a model), newest first")
    def rollouts(
        model: str | None = Query(None, description="Only this model's rollouts."),
        state: str | None = Query(None, description="Only rollouts in this state: "
                                  + ", ".join(_STATES) + "."),
    ) -> dict[str, Any]:
        from reprise.serve import list_rollouts

        if state is not None and state not in _STATES:
            raise UserError(f"unknown state {state!r}; one of {', '.join(_STATES)}")
        if model is not None and not ctx.store.list_model_versions(model):
            raise NotFoundError(f"no model named {model!r} in this workspace")
        recs = list_rollouts(model, workspace=ctx.workspace)
        rows = [_row(r) for r in recs if state is None or r.state == state]
        answer: dict[str, Any] = clean({"total": len(rows), "rollouts": rows})
        return answer

    @router.get("/api/rollouts/{rollout_id}",
                summary="One rollout: weights over time, the current window per version, "
                        "the checks, every decision with its evidence")
    def rollout(rollout_id: str) -> dict[str, Any]:
        from reprise.serve._analysis import decide
        from reprise.serve._policy import Policy
        from reprise.serve._rollouts import _summary, rollout_windows

        rec = ctx.store.get_rollout(rollout_id)
        if rec is None:
            raise NotFoundError(f"no rollout with id {rollout_id!r} in this workspace")
        now = time.time()
        policy = Policy.from_dict(rec.policy)
        at = rec.ended_at or now
        stable_w, cand_w = rollout_windows(ctx.store, rec, at)
        versions = {"stable": _summary(stable_w, policy),
                    "candidate": _summary(cand_w, policy)}
        events = ctx.store.rollout_events(rec.id, rec.ref)
        decisions = [_decision(e) for e in events]
        checks: list[dict[str, Any]] = []
        checks_at: float | None = None
        next_in: float | None = None
        if rec.running:  # the checks as they stand now (what `reprise rollout status` shows)
            d = decide(rec, stable_w, cand_w, policy, now)
            checks, checks_at = [c.to_dict() for c in d.checks], now
            next_in = max(0.0, rec.due_at() - now)
        else:  # the checks of the decision that ended it
            last = next((d for d in reversed(decisions) if d["checks"]), None)
            if last is not None:
                checks, checks_at = last["checks"], last["time"]
        shift = next((c for c in checks if c.get("name") == "prediction_shift"), None)
        # the shift is the candidate's outputs against the stable version's (the check's
        # Jensen-Shannon distance): a figure of the candidate only
        versions["candidate"]["prediction_shift"] = shift["value"] if shift else None
        versions["stable"]["prediction_shift"] = None
        answer: dict[str, Any] = clean({
            "rollout": _row(rec), "runs": _runs(ctx, rec),
            "weights": {"stable": 100.0 - rec.weight, "candidate": rec.weight},
            "window": {"since_stable": stable_w.since, "since_candidate": cand_w.since,
                       "until": at},
            "versions": versions, "checks": checks, "checks_at": checks_at,
            "next_decision_in": next_in,
            "progress": _progress(rec, events),
            "decisions": decisions})
        return answer

    return router


def _runs(ctx: UiContext, rec: Any) -> dict[str, str | None]:
    """The runs that produced the two versions (None: registered from a package)."""
    out: dict[str, str | None] = {}
    for role, version in (("stable", rec.stable), ("candidate", rec.candidate)):
        v = ctx.store.get_model_version(rec.name, version)
        out[role] = None if v is None else v.run_id
    return out


def _decision(e: Any) -> dict[str, Any]:
    p = e.payload or {}
    evidence = p.get("evidence") or {}
    return {"seq": e.seq, "time": e.time, "actor": e.actor, "action": e.action,
            "reason": p.get("reason"), "weight": p.get("weight"), "phase": p.get("phase"),
            "step": p.get("step"), "from": p.get("from"),
            "checks": evidence.get("checks") or [],
            "skipped": evidence.get("skipped") or [],
            "versions": evidence.get("versions"), "window": evidence.get("window"),
            "force": p.get("force"), "gates_passed": p.get("gates_passed")}


def _progress(rec: Any, events: list[Any]) -> list[dict[str, Any]]:
    """The candidate's weight from the start, at each decision that set one (the start's
    event, then each decision's), and now while the rollout runs."""
    out: list[dict[str, Any]] = []
    for e in events:
        w = (e.payload or {}).get("weight")
        if isinstance(w, int | float):
            out.append({"time": e.time, "weight": float(w), "action": e.action})
    if rec.running and out:
        out.append({"time": time.time(), "weight": rec.weight, "action": "now"})
    return out
