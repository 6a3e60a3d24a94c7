"""The closed loop: detector -> alarms -> actions (rollback, retrain, notify).

:func:`watch_once` is one step of a controller over recorded facts: it takes the
watcher's lease on ``NAME@ALIAS`` (the rollouts' lease row: one decider at a time; a
watcher that does not hold it does nothing), asks the detector for alarms, and for each
alarm it has not seen before records it and runs the actions the policy maps it to.

Every fact it acts on is in the audit log, so cooldowns and the in-flight limit hold
across processes and restarts without a table of their own. A round asks the database
for this subject's ``monitor.*`` events of the recent past only (the longest cooldown,
in-flight limit or repeat time, see :func:`_horizon`) and for the events of the alarms
it detected now, never for the whole log:

* ``monitor.alarm`` — an alarm (its id, kind, window, evidence); an alarm id already in
  the log is not acted on again (ids are content hashes: the same finding re-detected
  by a restarted watcher is the same alarm). A window that slides over drifted traffic
  raises a new alarm each round; one of the same kind on the same version within the
  policy's ``repeat`` time of the last recorded one, when every action it calls for is
  held back anyway, is the same incident: counted in the round's result, not recorded;
* ``monitor.action.started`` / ``.succeeded`` / ``.failed`` — an action and its result;
* ``monitor.action.skipped`` — an action the policy called for but the cooldown (the
  last start of that action on this model was too recent) or the in-flight limit (one
  started, not finished, and younger than its timeout) held back.

While a round runs (its detector, its actions: a retrain may take an hour) a heartbeat
thread renews the lease every third of its TTL, so no other watcher takes over a model
whose retrain is still running. A renewal refused (another watcher holds the lease: this
one stalled past the TTL) or none succeeding for a whole TTL loses it: the running
retrain is stopped (its process ended, nothing registered, ``reason: lease_lost``) and
the round acts on nothing more (``TickResult.lease_lost``).

Actions that need the server layer (abort a rollout, start a canary rollout) are
injected as callables by the CLI (:class:`LoopActions`), since ``monitor`` and
``serve`` do not import each other. The clock is a parameter.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reprise.core.errors import UserError
from reprise.monitor._alarm import Alarm
from reprise.monitor._triggers import TriggerPolicy, load_trigger_policy

__all__ = ["LoopActions", "TickResult", "default_holder", "lease_key", "live_detector",
           "loop_events", "split_alias", "watch", "watch_once"]

log = logging.getLogger("reprise.monitor.loop")

Detector = Callable[[], list[Alarm]]
DEFAULT_LEASE_TTL_S = 60.0
NOTIFY_IN_FLIGHT_S = 60.0  # a notify is a bounded POST: never "in flight" longer
_OTHER_IN_FLIGHT_S = 600.0  # a rollback
_CLOCK_SLACK_S = 300.0


@dataclass
class LoopActions:
    """What the loop cannot do from its own layer, injected by the caller.

    ``abort_rollout(name, alias, reason)`` aborts the running rollout of ``name@alias``;
    ``start_rollout(name, version, alias, settings)`` starts one to ``version`` with the
    policy's ``retrain.rollout`` settings (strategy, steps, interval) and returns its
    record (or anything with an ``id``). ``retrain`` and ``notify`` default to
    :func:`reprise.monitor._retrain.retrain` and :func:`reprise.monitor._notify.notify`.
    """

    abort_rollout: Callable[[str, str, str], Any] | None = None
    start_rollout: Callable[[str, int, str, dict[str, Any]], Any] | None = None
    retrain: Callable[..., dict[str, Any]] | None = None
    notify: Callable[..., dict[str, Any]] | None = None


@dataclass
class TickResult:
    """What one :func:`watch_once` did."""

    leader: bool
    alarms: list[Alarm] = field(default_factory=list)
    new_alarms: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)  # alarms of an incident already acted on
    actions: list[dict[str, Any]] = field(default_factory=list)  # action, outcome, ...
    lease_lost: bool = False  # the lease was lost during the round: it stopped acting

    def to_dict(self) -> dict[str, Any]:
        return {"leader": self.leader, "alarms": [a.to_dict() for a in self.alarms],
                "new_alarms": self.new_alarms, "repeated": self.repeated,
                "actions": self.actions, "lease_lost": self.lease_lost}


class _Heartbeat:
    """Renews ``holder``'s lease on ``key`` every ``ttl_s / 3`` in a thread while the
    round runs; :attr:`lost` is set once a renewal is refused or none succeeded for a
    whole TTL. ``clock()`` is the watcher's clock (the round's ``now``, moving on)."""

    def __init__(self, ws: Any, key: str, holder: str, ttl_s: float,
                 clock: Callable[[], float]) -> None:
        self.ws, self.key, self.holder, self.ttl_s, self.clock = ws, key, holder, ttl_s, clock
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"reprise-lease-{key}")

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last_ok = self.clock()
        while not self._stop.wait(self.ttl_s / 3):
            now = self.clock()
            try:
                ok = self.ws.metadata.acquire_lease(self.key, self.holder, self.ttl_s, now)
            except Exception:  # a blip of the database: try again, until the TTL is gone
                log.warning("renewing the lease %s failed", self.key, exc_info=True)
                ok = None
            if ok:
                last_ok = now
            elif ok is False or now - last_ok >= self.ttl_s:
                log.error("the lease %s was lost (held by %s now): this watcher stops acting",
                          self.key, self.ws.metadata.lease_holder(self.key, now)
                          if ok is False else "nobody it could ask")
                self.lost.set()
                return


def lease_key(name: str, alias: str) -> str:
    return f"monitor:{name}@{alias}"


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def _ws(workspace: Any) -> Any:
    from reprise.tracking._api import resolve_workspace

    return resolve_workspace(workspace)


def split_alias(ref: str) -> tuple[str, str]:
    from reprise.registry._registry import split_ref

    name, alias, version = split_ref(ref)
    if alias is None or version is not None:
        raise UserError(f"the loop watches an alias, NAME@ALIAS (e.g. {name}@production); got "
                        f"{ref!r}")
    return name, alias


def loop_events(ws: Any, subject: str, *, since: float | None = None) -> list[Any]:
    """The audit events of the loop on ``subject`` (``NAME@ALIAS``), oldest first (those
    appended at or after ``since``); the database finds them."""
    return list(ws.metadata.subject_events(subject, "monitor.", since=since))


def _horizon(pol: TriggerPolicy) -> float:
    """How far back a round needs the log: the longest cooldown, in-flight limit or
    repeat time (an older start neither holds an action back nor makes an incident),
    and some slack for the clocks of other watchers."""
    limits = [pol.repeat_s, NOTIFY_IN_FLIGHT_S, _OTHER_IN_FLIGHT_S, *pol.cooldown_s.values()]
    if pol.retrain is not None:
        limits.append(pol.retrain.timeout_s)
    return max(limits) + _CLOCK_SLACK_S


def _recent(ws: Any, subject: str, pol: TriggerPolicy, now: float) -> list[Any]:
    return loop_events(ws, subject, since=now - _horizon(pol))


def live_detector(ref: str, *, workspace: Any = None, window: Any = None,
                  reference: str | None = None) -> Detector:
    """The detector of live traffic: the alarms of ``live_report(ref, window=...,
    reference=...)``."""
    import importlib

    try:
        live = importlib.import_module("reprise.monitor._live")
    except ModuleNotFoundError:
        raise UserError("this installation has no live drift detector "
                        "(reprise.monitor._live); upgrade Reprise") from None

    def detect() -> list[Alarm]:
        kwargs: dict[str, Any] = {"workspace": workspace}
        if window is not None:
            kwargs["window"] = window
        if reference is not None:
            kwargs["reference"] = reference
        return list(live.live_report(ref, **kwargs).alarms)

    return detect


def watch_once(ref: str, policy: Any, detector: Detector, *, workspace: Any = None,
               holder: str | None = None, now: float | None = None,
               actions: LoopActions | None = None,
               lease_ttl_s: float = DEFAULT_LEASE_TTL_S) -> TickResult:
    """One step of the loop on ``ref`` (``NAME@ALIAS``); see the module docstring."""
    name, alias = split_alias(ref)
    pol = load_trigger_policy(policy)
    ws = _ws(workspace)
    who = holder or default_holder()
    t = time.time() if now is None else now
    if not ws.metadata.acquire_lease(lease_key(name, alias), who, lease_ttl_s, t):
        return TickResult(leader=False)
    started = time.monotonic()
    with _Heartbeat(ws, lease_key(name, alias), who, lease_ttl_s,
                    lambda: t + (time.monotonic() - started)) as beat:
        result = _round(ws, who, name, alias, pol, detector, actions or LoopActions(), t,
                        beat.lost)
    result.lease_lost = beat.lost.is_set()
    return result


def _round(ws: Any, who: str, name: str, alias: str, pol: TriggerPolicy, detector: Detector,
           actions: LoopActions, t: float, lost: threading.Event) -> TickResult:
    alarms = list(detector())
    subject = f"{name}@{alias}"
    # the recent events (cooldowns, incidents), and any event of the alarms detected now,
    # however old (an alarm id already in the log is not acted on again)
    events = _recent(ws, subject, pol, t)
    seen = {e.payload.get("alarm") for e in events if e.action == "monitor.alarm"}
    if alarms:
        seen |= {e.payload.get("alarm") for e in ws.metadata.subject_events(
            subject, "monitor.alarm", payload_in=("alarm", [a.id for a in alarms]))
            if e.action == "monitor.alarm"}
    last = {_incident(e.payload): float(e.payload.get("at", e.time)) for e in events
            if e.action == "monitor.alarm"}
    result = TickResult(leader=True, alarms=alarms)
    for alarm in alarms:
        if lost.is_set():
            break  # another watcher decides now
        if alarm.id in seen:
            continue
        key = _incident(alarm.to_dict())
        if key in last and t - last[key] < pol.repeat_s and all(
                _blocked(ws, subject, pol, a, t) for a in pol.actions_for(alarm.kind)):
            result.repeated.append(alarm.id)  # the same incident, nothing new to do
            continue
        seen.add(alarm.id)
        last[key] = t
        result.new_alarms.append(alarm.id)
        _audit(ws, who, "monitor.alarm", subject,
               {"alarm": alarm.id, "at": t, **alarm.to_dict()})
        log.warning("alarm %s on %s: %s", alarm.id, subject, alarm.message)
        for action in pol.actions_for(alarm.kind):
            if lost.is_set():
                break
            result.actions.append(_act(ws, who, subject, name, alias, pol, alarm, action,
                                       actions, t, lost.is_set))
    return result


def _incident(d: dict[str, Any]) -> tuple[Any, Any, Any]:
    return d.get("model"), d.get("version"), d.get("kind")


def _audit(ws: Any, who: str, action: str, subject: str, payload: dict[str, Any]) -> None:
    ws.metadata.append_audit(who, action, subject, payload)


def _blocked(ws: Any, subject: str, pol: TriggerPolicy, action: str,
             now: float) -> tuple[str, dict[str, Any]] | None:
    """``("in_flight"|"cooldown", details)`` when ``action`` may not start now."""
    events = [e for e in _recent(ws, subject, pol, now) if e.payload.get("action") == action]
    starts = [e for e in events if e.action == "monitor.action.started"]
    if not starts:
        return None
    last = starts[-1]
    at = float(last.payload.get("at", last.time))  # the watcher's clock (a parameter)
    ended = {e.payload.get("started_seq") for e in events
             if e.action in ("monitor.action.succeeded", "monitor.action.failed")}
    limit = (pol.retrain.timeout_s if action == "retrain" and pol.retrain is not None
             else NOTIFY_IN_FLIGHT_S if action == "notify" else _OTHER_IN_FLIGHT_S)
    if last.seq not in ended and now - at < limit:
        return "in_flight", {"started_seq": last.seq, "started_at": at,
                             "alarm_in_flight": last.payload.get("alarm")}
    cooldown = pol.cooldown_s.get(action, 0.0)
    if now - at < cooldown:
        return "cooldown", {"last_started_at": at, "cooldown_s": cooldown,
                            "free_at": at + cooldown}
    return None


def _act(ws: Any, who: str, subject: str, name: str, alias: str, pol: TriggerPolicy,
         alarm: Alarm, action: str, actions: LoopActions, now: float,
         cancelled: Callable[[], bool]) -> dict[str, Any]:
    base = {"alarm": alarm.id, "kind": alarm.kind, "action": action, "at": now,
            "window": alarm.window.to_dict(), "evidence": alarm.evidence}
    blocked = _blocked(ws, subject, pol, action, now)
    if blocked is not None:
        why, details = blocked
        _audit(ws, who, "monitor.action.skipped", subject, {**base, "reason": why, **details})
        log.info("%s on %s for alarm %s skipped: %s", action, subject, alarm.id, why)
        return {"action": action, "alarm": alarm.id, "outcome": "skipped", "reason": why}
    started = ws.metadata.append_audit(who, "monitor.action.started", subject, base)
    try:
        out = _run(ws, name, alias, pol, alarm, action, actions, cancelled)
    except Exception as exc:  # an action's failure is a recorded outcome, not a crash
        error = str(exc) or type(exc).__name__
        from reprise.monitor._retrain import RetrainStopped

        # a stopped retrain says why (timeout, lease_lost) and which process it ended
        stopped = ({"reason": exc.reason, "pid": exc.pid} if isinstance(exc, RetrainStopped)
                   else {})
        _audit(ws, who, "monitor.action.failed", subject,
               {**base, "started_seq": started.seq, "error": error, **stopped})
        log.error("%s on %s for alarm %s failed: %s", action, subject, alarm.id, error)
        return {"action": action, "alarm": alarm.id, "outcome": "failed", "error": error,
                **({"reason": stopped["reason"]} if "reason" in stopped else {})}
    ok = out.pop("ok", True)
    verb = "monitor.action.succeeded" if ok else "monitor.action.failed"
    _audit(ws, who, verb, subject, {**base, "started_seq": started.seq, "result": out})
    log.info("%s on %s for alarm %s %s", action, subject, alarm.id,
             "succeeded" if ok else "failed")
    return {"action": action, "alarm": alarm.id,
            "outcome": "succeeded" if ok else "failed", "result": out}


def _run(ws: Any, name: str, alias: str, pol: TriggerPolicy, alarm: Alarm, action: str,
         actions: LoopActions, cancelled: Callable[[], bool]) -> dict[str, Any]:
    if action == "rollback":
        return _rollback(ws, name, alias, alarm, actions)
    if action == "notify":
        from reprise.monitor._notify import notify

        if pol.notify is None:
            raise UserError("the policy has no notify.url")
        send = actions.notify or notify
        return send(pol.notify, {"alarm": alarm.to_dict(), "action": "notify",
                                 "model": f"{name}@{alias}"})
    from reprise.monitor._retrain import retrain

    run = actions.retrain or retrain
    return run(ws, name, alias, alarm, pol.retrain, start_rollout=actions.start_rollout,
               cancelled=cancelled)


def _rollback(ws: Any, name: str, alias: str, alarm: Alarm,
              actions: LoopActions) -> dict[str, Any]:
    """Abort the running rollout of ``name@alias`` (the injected serve call), or, with
    none, point the alias back at the version it held before."""
    running = ws.metadata.find_rollout(name, alias, running_only=True)
    reason = f"alarm {alarm.id} ({alarm.kind}): {alarm.message}"
    if running is not None:
        if alarm.version != running.candidate:
            return {"ok": False, "error": f"{name}@{alias} has a running rollout {running.id} "
                    f"to version {running.candidate}, and the alarm is about version "
                    f"{alarm.version}, not its candidate: nothing to roll back"}
        if actions.abort_rollout is None:
            raise UserError(f"{name}@{alias} has a running rollout {running.id}, and this "
                            "watcher was given no way to abort it (run it from the CLI)")
        actions.abort_rollout(name, alias, reason)
        return {"aborted_rollout": running.id, "stable": running.stable,
                "candidate": running.candidate}
    from reprise.registry._registry import rollback

    current = ws.metadata.get_aliases(name).get(alias)
    if current != alarm.version:
        return {"ok": False, "error": f"{name}@{alias} is version {current}, not the alarm's "
                f"version {alarm.version}: nothing to roll back"}
    moved_from, moved_to = rollback(ws, name, alias)
    return {"from": moved_from, "to": moved_to}


def watch(ref: str, policy: Any, detector: Detector, *, workspace: Any = None,
          interval_s: float = 60.0, holder: str | None = None,
          actions: LoopActions | None = None, stop: threading.Event | None = None,
          max_ticks: int | None = None, lease_ttl_s: float | None = None,
          on_tick: Callable[[TickResult], None] | None = None) -> None:
    """Run :func:`watch_once` every ``interval_s`` until ``stop`` is set (or ``max_ticks``
    ticks); the lease is given up on the way out so another watcher takes over at once."""
    name, alias = split_alias(ref)
    pol = load_trigger_policy(policy)
    ws = _ws(workspace)
    who = holder or default_holder()
    ttl = lease_ttl_s or max(3 * interval_s, 10.0)
    stop = stop or threading.Event()
    ticks = 0
    try:
        while not stop.is_set() and (max_ticks is None or ticks < max_ticks):
            try:
                res = watch_once(ref, pol, detector, workspace=ws, holder=who,
                                 actions=actions, lease_ttl_s=ttl)
            except Exception:  # a failing detector must not end a long-lived watcher
                log.exception("monitor loop on %s: this round failed", ref)
            else:
                if on_tick is not None:
                    on_tick(res)
            ticks += 1
            stop.wait(interval_s)
    finally:
        ws.metadata.release_lease(lease_key(name, alias), who)
