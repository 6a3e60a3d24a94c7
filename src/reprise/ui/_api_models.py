"""The models part of the dashboard's API: registered models, one model (versions, aliases
and who moved them), one version (its card and evaluation), the audit log with its
verification, and the actions (promote, rollback, abort a rollout).

The actions call the same audited functions as the CLI (``reprise.registry.promote`` /
``rollback``, ``reprise.serve.abort_rollout``), with the reason a person gave and the actor
``ui:USER@HOST``. They are refused (403) on a read-only server, and to a request that a
page of another site could have sent: it must carry a JSON body (a cross-site form cannot
set ``Content-Type: application/json`` without a preflight this server never grants) and,
when it has an ``Origin``, one that names this server's own host."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field, ValidationError

from reprise.core.errors import NotFoundError, UserError
from reprise.ui._context import UiContext, clean
from reprise.ui._errors import Forbidden

if TYPE_CHECKING:
    from fastapi import APIRouter

    from reprise.core._types import AuditEvent

__all__ = ["router"]

# the audit actions that move an alias (the registry's and a rollout's)
_ALIAS_ACTIONS = ("promote", "rollback", "rollout.promote")
# the evaluation report (plotly inline) runs in an opaque origin: its scripts cannot reach
# this server's API or the page's storage, and it loads nothing from anywhere
_REPORT_CSP = ("sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; "
               "style-src 'unsafe-inline'; img-src data: blob:; frame-ancestors 'self'")
_CARD_CACHE = 64  # versions whose card and evaluation are kept (a package never changes)


class _Action(BaseModel):
    reason: str = Field(description="Why (recorded in the audit log).")


_Body = TypeVar("_Body", bound=_Action)
_T = TypeVar("_T")


class PromoteBody(_Action):
    version: int = Field(description="The version the alias will point at.", ge=1)
    alias: str = Field(description="The alias to move: production, staging, ...")
    force: bool = Field(False, description="Promote although the version's evaluation "
                        "gates did not pass.")


class RollbackBody(_Action):
    alias: str = Field(description="The alias to return to the version it held before.")


class AbortBody(_Action):
    alias: str | None = Field(None, description="The rollout's alias, when the model has "
                              "rollouts running on several.")


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": model.model_json_schema()}}}}


def _same_origin(request: Request) -> None:
    """Refuse what a page of another site could make a browser send (403)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise Forbidden("an action needs a JSON body (Content-Type: application/json), not "
                        f"{kind or 'none'}: a form of another site cannot act here.")
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() != \
            request.headers.get("host", "").lower():
        raise Forbidden(f"an action from another site ({origin}) is refused; use the "
                        "dashboard's own page.")


def _parse(model: type[_Body], raw: bytes) -> _Body:
    import json

    try:
        data = json.loads(raw or b"null")
    except ValueError as exc:
        raise UserError(f"the body is not valid JSON ({exc}).") from None
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}"
                           for e in exc.errors())
        raise UserError(f"invalid request: {fields}.") from None
    if not parsed.reason.strip():
        raise UserError("a reason is required: it is recorded in the audit log.")
    return parsed


def _actor() -> str:
    from reprise.registry._registry import actor

    return f"ui:{actor()}"


def _model_of(subject: str) -> str:
    """The model an audit event is about (subjects: NAME, NAME:V, NAME@ALIAS)."""
    for sep in ("@", ":"):
        subject = subject.partition(sep)[0]
    return subject


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Depends, Query

    router = APIRouter(tags=["models"])
    cards: dict[str, dict[str, Any]] = {}
    cards_lock = threading.Lock()

    def reg(fn: Callable[..., _T], *args: Any, **kw: Any) -> _T:
        """A registry function on this workspace. Each catches up the journals of live
        runs first (as ``ctx.fresh`` does), which one thread at a time may do."""
        with ctx._recovering:
            return fn(*args, workspace=ctx.workspace, **kw)

    @router.get("/api/models", summary="Registered models: versions, newest, aliases")
    def models() -> dict[str, Any]:
        from reprise.registry import list_models

        answer: dict[str, Any] = clean({"models": reg(list_models)})
        return answer

    @router.get("/api/models/{name}", summary="One model: its versions (run, metrics, gates, "
                "aliases), each alias with who moved it when, and its running rollouts")
    def model(name: str) -> dict[str, Any]:
        from reprise.registry import describe_model
        from reprise.serve import list_rollouts

        info = reg(describe_model, name)
        info["aliases"] = [_alias(name, alias, version)
                           for alias, version in sorted(info["aliases"].items())]
        info["rollouts"] = [{"id": r.id, "alias": r.alias, "stable": r.stable,
                             "candidate": r.candidate, "state": r.state, "weight": r.weight}
                            for r in list_rollouts(name, running_only=True,
                                                   workspace=ctx.workspace)]
        answer: dict[str, Any] = clean(info)
        return answer

    def _alias(name: str, alias: str, version: int) -> dict[str, Any]:
        moves = [_move(e) for e in ctx.store.subject_events(f"{name}@{alias}", "")
                 if e.action in _ALIAS_ACTIONS]
        return {"alias": alias, "version": version,
                "rollback_to": _previous(ctx.store.alias_history(name, alias)),
                "history": moves[::-1]}

    @router.get("/api/models/{name}/versions/{version}", summary="One version: its run, "
                "metrics, gates, signature, lineage, model card and evaluation")
    def version(name: str, version: int) -> dict[str, Any]:
        from reprise.registry import describe_model

        info = reg(describe_model, f"{name}:{version}")
        info.update(_card(name, version, info["package"]))
        answer: dict[str, Any] = clean(info)
        return answer

    def _card(name: str, version: int, package: str) -> dict[str, Any]:
        from reprise.registry import model_card

        with cards_lock:
            hit = cards.get(package)
        if hit is None:  # a package never changes: read it once (it is verified on reading)
            got = reg(model_card, f"{name}:{version}")
            hit = {"card": got["card"], "evaluation": got["evaluation"]}
            with cards_lock:
                if len(cards) >= _CARD_CACHE:
                    cards.pop(next(iter(cards)))
                cards[package] = hit
        return hit

    @router.get("/api/models/{name}/versions/{version}/report", summary="One version's "
                "evaluation report: a self-contained HTML page, sandboxed (no access to this "
                "origin), for an iframe", response_class=HTMLResponse)
    def report(name: str, version: int) -> HTMLResponse:
        from reprise.evaluate import Evaluation
        from reprise.registry import describe_model

        info = reg(describe_model, f"{name}:{version}")
        evaluation = _card(name, version, info["package"])["evaluation"]
        if evaluation is None:
            raise NotFoundError(f"{name}:{version} was packaged without an evaluation; it has "
                                "no report.")
        try:
            html = Evaluation.from_dict(evaluation).to_html()
        except (KeyError, TypeError, ValueError) as exc:  # a hand-made evaluation document
            raise UserError(f"the evaluation stored with {name}:{version} cannot be drawn as "
                            f"a report ({type(exc).__name__}: {exc}); its card and metrics "
                            "are on the model's page.") from None
        return HTMLResponse(html,
                            headers={"Content-Security-Policy": _REPORT_CSP,
                                     "X-Content-Type-Options": "nosniff",
                                     "Cache-Control": "no-cache"})

    @router.get("/api/audit", summary="The audit log, newest first, a page at a time")
    def audit(
        model: str | None = Query(None, description="Only the events about this model."),
        limit: int = Query(50, ge=1, le=1000),
        offset: int = Query(0, ge=0),
    ) -> dict[str, Any]:
        from reprise.registry import audit_log

        events = reg(audit_log)
        if model is not None:
            events = [e for e in events if _model_of(e["subject"]) == model]
        events.reverse()
        page: dict[str, Any] = clean({"total": len(events), "offset": offset, "limit": limit,
                                       "events": events[offset:offset + limit]})
        return page

    @router.get("/api/audit/verify", summary="Whether the audit log is intact (what `reprise "
                "audit verify` checks): every event's hash and the chain linking them")
    def verify() -> dict[str, Any]:
        from reprise.registry import verify_audit

        report = reg(verify_audit).to_dict()
        report["status"] = "intact" if report["ok"] else "broken"
        answer: dict[str, Any] = clean(report)
        return answer

    def action(what: str) -> Any:
        async def guard(request: Request) -> bytes:
            ctx.require_actions(what)
            _same_origin(request)
            return await request.body()

        return Depends(guard)

    @router.post("/api/models/{name}/promote", summary="Action: point an alias at a version "
                 "(audited with the reason; 403 unless --allow-actions)",
                 openapi_extra=_body_doc(PromoteBody))
    def promote(name: str, raw: bytes = action("promoting a model")) -> dict[str, Any]:
        from reprise.registry import promote as do

        body = _parse(PromoteBody, raw)
        before = reg(do, name, body.version, body.alias, force=body.force,
                     reason=body.reason, by=_actor())
        return {"name": name, "alias": body.alias, "version": body.version,
                "previous": before, "changed": before != body.version}

    @router.post("/api/models/{name}/rollback", summary="Action: return an alias to the "
                 "version it held before (audited with the reason; 403 unless "
                 "--allow-actions)", openapi_extra=_body_doc(RollbackBody))
    def rollback(name: str, raw: bytes = action("rolling back a model")) -> dict[str, Any]:
        from reprise.registry import rollback as do

        body = _parse(RollbackBody, raw)
        old, new = reg(do, name, body.alias, reason=body.reason, by=_actor())
        return {"name": name, "alias": body.alias, "from": old, "to": new}

    @router.post("/api/models/{name}/rollouts/abort", summary="Action: abort the model's "
                 "running rollout (the candidate's weight goes to 0; audited with the "
                 "reason; 403 unless --allow-actions)", openapi_extra=_body_doc(AbortBody))
    def abort(name: str, raw: bytes = action("aborting a rollout")) -> dict[str, Any]:
        from reprise.serve import abort_rollout

        body = _parse(AbortBody, raw)
        rec = abort_rollout(name, body.reason, body.alias, by=_actor(),
                            workspace=ctx.workspace)
        answer: dict[str, Any] = clean({
            "id": rec.id, "name": rec.name, "alias": rec.alias, "state": rec.state,
            "stable": rec.stable, "candidate": rec.candidate, "reason": rec.reason})
        return answer

    return router


def _move(e: AuditEvent) -> dict[str, Any]:
    """Who moved an alias, when, from which version to which, and why."""
    p = e.payload
    if e.action == "promote":
        moved = (p.get("previous"), p.get("version"))
    elif e.action == "rollback":
        moved = (p.get("from"), p.get("to"))
    else:  # a rollout's promotion: the candidate took the stable version's place
        moved = (p.get("stable"), p.get("candidate"))
    return {"seq": e.seq, "time": e.time, "actor": e.actor, "action": e.action,
            "from": moved[0], "to": moved[1], "reason": p.get("reason")}


def _previous(history: list[int]) -> int | None:
    """The version a rollback would return the alias to (None: it cannot)."""
    return history[-2] if len(history) >= 2 else None
