"""The closed loop's wiring in the CLI layer: the rollout calls of ``reprise.serve`` handed
to ``reprise.monitor``'s loop (the two do not import each other), and the watcher threads
of ``reprise serve --monitor``. No Typer here: ``reprise serve`` starts without it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from reprise.cli._fast import workspace as _ws

__all__ = ["loop_actions", "start_watchers"]


def loop_actions(ws: Any) -> Any:
    """The loop's actions with the rollout calls of ``reprise.serve`` plugged in."""
    from reprise.monitor._loop import LoopActions
    from reprise.serve import abort_rollout, start_rollout

    def abort(name: str, alias: str, reason: str) -> Any:
        return abort_rollout(name, reason, alias, workspace=ws)

    def start(name: str, version: int, alias: str, settings: dict[str, Any]) -> Any:
        return start_rollout(name, version, alias=alias, strategy=settings["strategy"],
                             steps=settings.get("steps"),
                             interval=settings.get("interval", "60s"),
                             policy=settings.get("policy"), workspace=ws)

    return LoopActions(abort_rollout=abort, start_rollout=start)


def start_watchers(refs: list[str], policy: Path, *, interval_s: float
                   ) -> tuple[threading.Event, list[threading.Thread]]:
    """Run the loop on each followed alias of ``refs`` in background threads (for
    ``reprise serve --monitor``); only the holder of a model's lease acts. Set the event
    to stop them."""
    from reprise.core.errors import UserError
    from reprise.monitor._loop import live_detector, watch
    from reprise.monitor._triggers import load_trigger_policy

    pol = load_trigger_policy(policy)  # a bad policy stops the server before it binds
    watched = [r for r in refs if "@" in r]
    if not watched:
        raise UserError("--monitor watches followed aliases (NAME@ALIAS); none of "
                        f"{refs} is one")
    ws = _ws()
    stop = threading.Event()
    threads = [threading.Thread(
        target=watch, name=f"reprise-monitor-{ref}", daemon=True,
        args=(ref, pol, live_detector(ref, workspace=ws, window=pol.window,
                                      reference=pol.reference)),
        kwargs={"workspace": ws, "interval_s": interval_s, "actions": loop_actions(ws),
                "stop": stop}) for ref in watched]
    for t in threads:
        t.start()
    return stop, threads
