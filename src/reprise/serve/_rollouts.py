"""Rollouts from Python (and the CLI): start, status, list, promote, abort, and one
analysis round, :func:`analyze_once`, which the server's decider calls when due.

A rollout moves ``NAME@ALIAS`` from its current (*stable*) version to a *candidate*,
by canary steps, on shadow traffic, or blue-green. Starting one checks the candidate
first (compatible signature, loads, warms up) and writes nothing when it fails. Every
decision is applied by compare-and-set on the rollout's decision counter, with its
audit event (evidence included) in the same transaction, so no decision is ever
taken twice, however many servers analyse the same window.

For a server following ``NAME@ALIAS`` (the hooks it calls; all on ``ws.metadata``):

* each poll, ``find_rollout(name, alias, running_only=True)``: route by its ``weight`` and
  ``phase`` (``shadow``: copies only), sticky by its ``key``;
* count outcomes per version in :class:`~reprise.core.BucketRow` rows of
  ``bucket_of(t, bucket_seconds(rec.interval_s))`` and flush them with ``add_buckets``
  (rows add up, so a bucket may be flushed in parts, by every server);
* the decider: ``acquire_lease("rollout:" + rec.id, holder, ttl_s, time.time())``, and
  while it holds it, ``analyze_once(name, alias, rollout_id=rec.id, actor=holder)``
  every poll (a hard failure is acted on at once; other decisions come when due).

Example:
    >>> rec = start_rollout("churn", 2, interval="5m")       # doctest: +SKIP
    >>> analyze_once("churn", "production").action          # doctest: +SKIP
    'wait'
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from reprise.core import new_id
from reprise.core._rollout_types import (
    STRATEGIES,
    RolloutRecord,
    bucket_of,
    bucket_seconds,
)
from reprise.core.errors import NotFoundError, UserError
from reprise.serve._analysis import (
    Decision,
    VersionWindow,
    burn_rates,
    decide,
    finite_json,
    stable_since,
)
from reprise.serve._candidate import load_and_warm_up, signature_problems
from reprise.serve._policy import Policy, load_policy, parse_duration

__all__ = ["abort_rollout", "analyze_once", "list_rollouts", "promote_rollout",
           "rollout_status", "rollout_windows", "start_rollout"]

DEFAULT_STEPS = (5, 25, 50, 100)
_PHASE = {"canary": "steps", "shadow": "shadow", "blue-green": "shadow"}


def _ws(workspace: Any) -> Any:
    from reprise.tracking._api import open_workspace

    return workspace if workspace is not None else open_workspace()


def _actor(actor: str | None) -> str:
    from reprise.registry._registry import actor as who

    return actor or who()


# -- start -------------------------------------------------------------------------------

def start_rollout(name: str, candidate: int, *, alias: str = "production",
                  strategy: str = "canary", steps: Sequence[int] | None = None,
                  interval: str | float = "60s", policy: Any = None,
                  key_header: str | None = None, key_column: str | None = None,
                  force: bool = False, reason: str | None = None,
                  workspace: Any = None) -> RolloutRecord:
    """Start moving ``name@alias`` from its current version to ``candidate``.

    Refused (UserError, nothing written) when: the alias or version does not exist,
    the candidate is the stable version, is not ready, or its evaluation gates did not
    pass (``force=True`` with a ``reason`` overrides, as for ``reprise models promote``);
    the alias already has a running rollout; the candidate's signature does not suit
    the stable version's requests; the candidate fails to load or to answer its
    example. ``steps`` (canary only) are the candidate's weights in percent;
    ``interval`` (``"60s"``, ``"5m"``, seconds) the least time between decisions;
    ``policy`` a YAML file, a mapping or a :class:`Policy`; ``key_header`` or
    ``key_column`` makes routing sticky per key.
    """
    from reprise.registry._registry import split_ref

    split_ref(f"{name}@{alias}")  # the name rules, as the registry words them
    if strategy not in STRATEGIES:
        raise UserError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    weights = _steps(strategy, steps)
    interval_s = parse_duration(interval)
    pol = load_policy(policy)
    key = _key(key_header, key_column)
    ws = _ws(workspace)
    store = ws.metadata
    stable, cand, gates = _versions(ws, name, alias, candidate, force, reason)
    if "column" in key:
        _check_key_column(key["column"], stable.signature, cand.signature)
    from reprise.registry._api import RegistrySource

    warm = load_and_warm_up(RegistrySource(ws), name, candidate)
    now = time.time()
    who = _actor(None)
    rec = RolloutRecord(
        id=new_id(), name=name, alias=alias, stable=stable.version, candidate=candidate,
        strategy=strategy, steps=weights, interval_s=interval_s, policy=pol.to_dict(),
        key=key, state="running", step=0,
        weight=float(weights[0]) if strategy == "canary" else 0.0, phase=_PHASE[strategy],
        step_started_at=now, created_at=now, ended_at=None, failures=0, decisions=0,
        reason=reason if force else None, actor=who)
    payload: dict[str, Any] = {
        "stable": stable.version, "candidate": candidate, "strategy": strategy,
        "steps": weights, "interval_s": interval_s, "key": key, "policy": rec.policy,
        "weight": rec.weight, "gates_passed": gates, "warm_up": warm}
    if force:
        payload.update(force=True, reason=reason)
    return store.create_rollout(rec, (who, "rollout.start", rec.ref, payload))  # type: ignore[no-any-return]


def _versions(ws: Any, name: str, alias: str, candidate: int, force: bool,
              reason: str | None) -> tuple[Any, Any, Any]:
    """``(stable, candidate, gates_passed)``, or a UserError for a candidate that cannot
    serve the stable version's traffic (see :func:`start_rollout`); reads only."""
    from reprise.registry._registry import get_version

    stable = _stable(ws, name, alias)
    cand = get_version(ws, name, candidate)
    if cand.version == stable.version:
        raise UserError(f"{name}@{alias} is version {candidate} already; a rollout needs "
                        "another version as its candidate")
    gates = _check_candidate(cand, alias, force, reason)
    running = ws.metadata.find_rollout(name, alias, running_only=True)
    if running is not None:
        raise UserError(f"{name}@{alias} already has a running rollout {running.id} (to "
                        f"version {running.candidate}); finish it first with `reprise "
                        f"rollout promote {name} --alias {alias}` or `reprise rollout abort "
                        f"{name} --alias {alias}`")
    problems = signature_problems(stable.signature, cand.signature)
    if problems:
        raise UserError(f"{cand.ref}'s signature does not suit the requests of {stable.ref} "
                        f"(the stable version of {name}@{alias}): " + "; ".join(problems)
                        + ". A rollout sends the same requests to both versions.")
    return stable, cand, gates


def _steps(strategy: str, steps: Sequence[int] | None) -> list[int]:
    if strategy != "canary":
        if steps is not None:
            raise UserError(f"--steps applies to canary rollouts; a {strategy} rollout has "
                            "no steps")
        return []
    weights = list(DEFAULT_STEPS if steps is None else steps)
    if (not weights or any(isinstance(w, bool) or not isinstance(w, int) for w in weights)
            or any(not 0 < w <= 100 for w in weights)
            or any(b <= a for a, b in zip(weights, weights[1:], strict=False))):
        raise UserError(f"steps must be increasing whole percentages in 1..100, e.g. "
                        f"5,25,50,100; got {weights}")
    return weights


def _key(header: str | None, column: str | None) -> dict[str, str]:
    if header and column:
        raise UserError("give --key-header or --key-column, not both")
    if header is not None:
        token = header.strip().lower()
        if not token or any(c.isspace() or c in '"(),/:;<=>?@[\\]{}' or not c.isprintable()
                            for c in token):
            raise UserError(f"--key-header {header!r} is not an HTTP header name")
        return {"header": token}
    if column is not None:
        return {"column": column}
    return {}


def _check_key_column(column: str, *signatures: dict[str, Any] | None) -> None:
    for sig in signatures:
        names = [f["name"] for f in (sig or {}).get("inputs") or []]
        if column not in names:
            raise UserError(f"--key-column {column!r} is not an input of the model (inputs: "
                            f"{', '.join(names)})")


def _stable(ws: Any, name: str, alias: str) -> Any:
    from reprise.registry._registry import get_version, parse_ref

    aliases = ws.metadata.get_aliases(name)
    if alias not in aliases:
        parse_ref(ws, name)  # no model at all: the registry's message, with the names
        raise NotFoundError(f"model {name!r} has no alias {alias!r} (aliases: "
                            f"{sorted(aliases) or 'none'}); a rollout starts from the version "
                            f"an alias holds: `reprise models promote {name} VERSION --alias "
                            f"{alias}` first")
    return get_version(ws, name, aliases[alias])


def _check_candidate(cand: Any, alias: str, force: bool, reason: str | None) -> Any:
    if cand.status != "ready":
        raise UserError(f"{cand.ref} is {cand.status}; only ready versions can be rolled out")
    passed = cand.metrics.get("gates_passed")
    if force and not (reason and reason.strip()):
        raise UserError("--force needs --reason \"...\": the override is recorded in the "
                        "audit log")
    if passed is not True and not force:
        why = ("its evaluation gates failed" if passed is False
               else "it has no evaluation with gates (package_model(evaluation=...))")
        raise UserError(f"cannot roll {cand.ref} out to {alias!r}: {why}. A rollout ends in "
                        "a promotion; override with --force --reason \"...\"")
    return passed


# -- reading ---------------------------------------------------------------------------

def list_rollouts(name: str | None = None, *, running_only: bool = False,
                  workspace: Any = None) -> list[RolloutRecord]:
    """Rollouts (of ``name``), newest first."""
    return _ws(workspace).metadata.list_rollouts(  # type: ignore[no-any-return]
        name, running_only=running_only)


def _pick(store: Any, name: str, alias: str | None, *, running: bool) -> RolloutRecord:
    """The running rollout of ``name`` (on ``alias``), or with ``running=False`` the
    newest one when none runs."""
    found = store.list_rollouts(name, alias=alias)
    live = [r for r in found if r.running]
    if alias is None and len({r.alias for r in live}) > 1:
        raise UserError(f"model {name!r} has running rollouts on aliases "
                        f"{sorted({r.alias for r in live})}; name one with --alias")
    if live:
        return live[0]  # type: ignore[no-any-return]
    on = f" on alias {alias!r}" if alias else ""
    if running or not found:
        latest = f" (the latest, {found[0].id}, is {found[0].state})" if found else ""
        raise NotFoundError(f"model {name!r} has no running rollout{on}{latest}; start one "
                            f"with `reprise rollout start {name} VERSION`")
    return found[0]  # type: ignore[no-any-return]


def rollout_windows(store: Any, rec: RolloutRecord,
                    now: float) -> tuple[VersionWindow, VersionWindow]:
    """The analysis windows at ``now``: the candidate's since its step (or phase) began,
    and the stable version's over the same buckets (the same traffic, compared), or,
    while the candidate takes every live request, since the rollout began (its baseline,
    :func:`~reprise.serve._analysis.stable_since`). A canary's window starts with the
    bucket holding the step's start (that bucket's earlier requests are the same
    candidate's, at the previous weight); blue-green's live phases start with the first
    bucket wholly inside them, so that shadow copies never count as live traffic.

    Only those buckets are read: per version, a range of the buckets' key."""
    b = bucket_seconds(rec.interval_s)
    last = bucket_of(now, b)
    step_first = bucket_of(rec.step_started_at, b)
    if rec.strategy == "blue-green" and rec.phase != "shadow":
        step_first = math.ceil(rec.step_started_at / b - 1e-9)
    first = bucket_of(stable_since(rec), b)
    if first == step_first:
        rows = store.window_buckets(rec.id, first, last, versions=(rec.stable, rec.candidate))
        stable_rows, cand_rows = rows, rows
    else:
        stable_rows = store.window_buckets(rec.id, first, last, versions=(rec.stable,))
        cand_rows = store.window_buckets(rec.id, step_first, last, versions=(rec.candidate,))
    stable = VersionWindow.from_rows(rec.stable, "stable", stable_rows, first_bucket=first,
                                     last_bucket=last, model=rec.name, since=first * b,
                                     until=now)
    cand = VersionWindow.from_rows(rec.candidate, "candidate", cand_rows,
                                   mode="shadow" if rec.phase == "shadow" else "live",
                                   first_bucket=step_first, last_bucket=last, model=rec.name,
                                   since=max(step_first * b, rec.step_started_at), until=now)
    return stable, cand


def rollout_status(name: str, alias: str | None = None, *, now: float | None = None,
                   workspace: Any = None) -> dict[str, Any]:
    """The running (else the latest) rollout of ``name``: its record, the weights, each
    version's metrics in the current window, the checks as they stand, the time to the
    next decision, and every decision taken so far (from the audit log)."""
    now = time.time() if now is None else now
    store = _ws(workspace).metadata
    rec = _pick(store, name, alias, running=False)
    policy = Policy.from_dict(rec.policy)
    stable_w, cand_w = rollout_windows(store, rec, rec.ended_at or now)
    out: dict[str, Any] = {
        "rollout": rec.to_dict(), "ref": rec.ref,
        "weights": {str(rec.stable): 100.0 - rec.weight, str(rec.candidate): rec.weight},
        "shadow": rec.running and rec.phase == "shadow",
        "versions": {"stable": _summary(stable_w, policy),
                     "candidate": _summary(cand_w, policy)},
        "checks": [], "next_decision_in": None, "next": None,
        "decisions": _decisions(store, rec.id, rec.ref)}
    if rec.running:
        d = decide(rec, stable_w, cand_w, policy, now)
        out["checks"] = [c.to_dict() for c in d.checks]
        out["next_decision_in"] = max(0.0, rec.due_at() - now)
        out["next"] = {"action": d.action, "reason": d.reason}
    return finite_json(out)  # type: ignore[no-any-return]


def _summary(w: VersionWindow, policy: Policy) -> dict[str, Any]:
    return {"version": w.version, "requests": w.requests, "errors": w.errors,
            "error_rate": w.error_rate, "p50_ms": w.quantile(0.5), "p99_ms": w.quantile(0.99),
            "outputs": w.outputs, "shadow_compared": w.shadow_compared,
            "agreement": w.agreement, "shadow_dropped": w.shadow_dropped,
            "burn_rates": burn_rates(w, policy)}


def _decisions(store: Any, rollout_id: str, ref: str) -> list[dict[str, Any]]:
    return [{"seq": e.seq, "time": e.time, "actor": e.actor, "action": e.action,
             "reason": e.payload.get("reason"), "weight": e.payload.get("weight"),
             "phase": e.payload.get("phase")}
            for e in store.rollout_events(rollout_id, ref)]


# -- decisions ---------------------------------------------------------------------------

def analyze_once(name: str, alias: str | None = None, now: float | None = None, *,
                 rollout_id: str | None = None, actor: str | None = None,
                 workspace: Any = None, quick: bool = False) -> Decision:
    """One analysis round of the running rollout of ``name@alias`` (or ``rollout_id``)
    from the stored buckets, at ``now`` (injectable: tests decide without sleeping).
    ``quick``: a wait runs only the checks that may hard-fail (``decide``).

    A ``wait`` is returned as is; any other decision is applied by compare-and-set with
    its audit event (the promotion moving the alias in the same transaction), and
    ``applied`` says whether this call's decision was the one applied: of several
    callers deciding on the same state, exactly one applies. The server's decider calls
    this when it holds the rollout's lease (``store.acquire_lease("rollout:" + id, ...)``).
    """
    now = time.time() if now is None else now
    store = _ws(workspace).metadata
    if rollout_id is not None:
        rec = store.get_rollout(rollout_id)
        if rec is None or not rec.running:
            state = "absent" if rec is None else rec.state
            raise NotFoundError(f"rollout {rollout_id!r} is not running ({state})")
    else:
        rec = _pick(store, name, alias, running=True)
    held = store.get_aliases(rec.name).get(rec.alias)
    if held != rec.stable:  # someone moved the alias by hand: the rollout has no baseline
        return _end(store, rec, "abort", _actor(actor), now,
                    f"{rec.ref} was moved to version {held} outside the rollout")
    policy = Policy.from_dict(rec.policy)
    stable_w, cand_w = rollout_windows(store, rec, now)
    d = decide(rec, stable_w, cand_w, policy, now, quick=quick)
    if d.action == "wait":
        return d
    try:
        d.applied = _apply(store, rec, d, _actor(actor))
    except UserError as exc:  # NotFoundError too: the candidate was archived or deleted
        if d.action != "promote":
            raise
        return _end(store, rec, "abort", _actor(actor), now, f"the promotion was refused: {exc}")
    return d


def _apply(store: Any, rec: RolloutRecord, d: Decision, actor: str) -> bool:
    payload = finite_json({"action": d.action, "reason": d.reason, "stable": rec.stable,
                       "candidate": rec.candidate, "step": d.changes.get("step", rec.step),
                       "weight": d.changes.get("weight", rec.weight),
                       "phase": d.changes.get("phase", rec.phase),
                       "from": {"step": rec.step, "weight": rec.weight, "phase": rec.phase},
                       "evidence": d.evidence})
    promote = d.action == "promote"
    package = _package(store, rec) if promote else None
    return bool(store.apply_rollout_decision(
        rec.id, rec.decisions, d.changes, (actor, f"rollout.{d.action}", rec.ref, payload),
        move_alias_to=rec.candidate if promote else None, package_hash=package))


def _package(store: Any, rec: RolloutRecord) -> str | None:
    v = store.get_model_version(rec.name, rec.candidate)
    return None if v is None else str(v.package_hash)


def _end(store: Any, rec: RolloutRecord, action: str, actor: str, now: float,
         reason: str) -> Decision:
    """Abort (weight 0) or promote (alias moved) by decision of a person or a rule."""
    state = {"abort": "aborted", "promote": "promoted"}[action]
    weight = 100.0 if action == "promote" else 0.0
    changes = {"state": state, "weight": weight, "ended_at": now, "reason": reason}
    policy = Policy.from_dict(rec.policy)
    stable_w, cand_w = rollout_windows(store, rec, now)
    evidence = decide(rec, stable_w, cand_w, policy, now).evidence
    d = Decision(action, changes, [], evidence, reason)
    d.applied = _apply(store, rec, d, actor)
    return d


def promote_rollout(name: str, alias: str | None = None, *, reason: str | None = None,
                    now: float | None = None, workspace: Any = None) -> RolloutRecord:
    """Skip to the end: the candidate takes the alias now (audited with the evidence of
    the moment); the rollout ends ``promoted``."""
    return _finish(name, alias, "promote", reason or "promoted by hand", now, workspace)


def abort_rollout(name: str, reason: str | None = None, alias: str | None = None, *,
                  now: float | None = None, by: str | None = None,
                  workspace: Any = None) -> RolloutRecord:
    """Stop the rollout: the candidate's weight goes to 0 and the alias stays where it
    was; the rollout ends ``aborted``. ``by``: the audit event's actor (default
    ``REPRISE_ACTOR``, else user@host)."""
    return _finish(name, alias, "abort", reason or "aborted by hand", now, workspace, by)


def _finish(name: str, alias: str | None, action: str, reason: str, now: float | None,
            workspace: Any, by: str | None = None) -> RolloutRecord:
    store = _ws(workspace).metadata
    for _ in range(20):  # a decider may apply a decision in between: read again, retry
        rec = _pick(store, name, alias, running=True)
        d = _end(store, rec, action, _actor(by), time.time() if now is None else now, reason)
        if d.applied:
            return store.get_rollout(rec.id)  # type: ignore[no-any-return]
    raise UserError(f"the rollout of {name!r} kept changing under this {action}; try again")
