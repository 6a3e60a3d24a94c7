"""``reprise monitor watch NAME@ALIAS --policy loop.yaml``: the closed loop as a long-lived
process, and the same loop inside ``reprise serve --monitor loop.yaml``.

The CLI is where the loop's server-layer actions are wired (``_loop_wiring.py``, which
``reprise serve --monitor`` uses without loading Typer): ``monitor`` and ``serve`` do not
import each other, so aborting a rollout and starting a canary are handed to the loop as
callables from the CLI layer.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from reprise.cli import _render as render
from reprise.cli._fast import workspace as _ws
from reprise.cli._loop_wiring import loop_actions

__all__ = ["add_watch_command"]


def add_watch_command(app: typer.Typer) -> None:
    @app.command("watch")
    def watch_command(
        ref: Annotated[str, typer.Argument(metavar="NAME@ALIAS",
                                           help="The served model to watch.")],
        policy: Annotated[Path, typer.Option(
            "--policy", help="YAML trigger policy: rules (alarm kinds -> rollback | retrain "
            "| notify), cooldown, retrain, notify.")],
        interval: Annotated[float, typer.Option(
            "--interval", help="Seconds between two looks at the traffic.")] = 60.0,
        window: Annotated[int | None, typer.Option(
            "--window", help="Requests per window judged (default: the policy's window, "
            "else 1,000).")
        ] = None,
        reference: Annotated[str | None, typer.Option(
            "--reference", metavar="DATASET@N", help="Reference rows (default: the policy's "
            "reference, else the model's training dataset version).")] = None,
        once: Annotated[bool, typer.Option(
            "--once", help="Look once, act, print what was done, and exit.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Run the closed loop on NAME@ALIAS: detect drift and degradation in its logged
        traffic and act by the policy (roll back, retrain and start a canary, notify).
        One watcher decides at a time (a lease); every alarm and action is audited."""
        from reprise.core.errors import UserError
        from reprise.monitor._loop import live_detector, watch, watch_once
        from reprise.monitor._triggers import load_trigger_policy

        if not interval > 0:
            raise UserError(f"--interval must be more than 0 seconds, not {interval}.")
        pol = load_trigger_policy(policy)
        ws = _ws()
        detect = live_detector(ref, workspace=ws,
                               window=window if window is not None else pol.window,
                               reference=reference or pol.reference)
        if once:  # one round, then the lease is given up (the next watcher need not wait)
            from reprise.monitor._loop import default_holder, lease_key, split_alias

            who = default_holder()
            try:
                res = watch_once(ref, pol, detect, workspace=ws, holder=who,
                                 actions=loop_actions(ws))
            finally:
                ws.metadata.release_lease(lease_key(*split_alias(ref)), who)
            _print(ref, res, as_json)
            return
        typer.echo(f"watching {ref} every {interval:g}s (Ctrl-C stops)", err=True)
        stop = threading.Event()
        try:
            watch(ref, pol, detect, workspace=ws, interval_s=interval,
                  actions=loop_actions(ws), stop=stop,
                  on_tick=lambda r: _print(ref, r, as_json)
                  if r.new_alarms or r.lease_lost else None)
        except KeyboardInterrupt:
            stop.set()


def _print(ref: str, res: Any, as_json: bool) -> None:
    if as_json:
        render.print_json(res.to_dict())
        return
    if not res.leader:
        typer.echo(f"{ref}: another watcher holds the lease; nothing done")
        return
    if not res.alarms:
        typer.echo(f"{ref}: no alarm")
    for a in res.alarms:
        new = " (new)" if a.id in res.new_alarms else ""
        typer.echo(f"{ref}: alarm {a.id} {a.kind}{new}: {a.message}")
    for act in res.actions:
        detail = ": ".join(str(act[k]) for k in ("reason", "error") if act.get(k))
        result = act.get("result") or {}
        if not detail and result:
            detail = ", ".join(f"{k}={result[k]}" for k in ("version", "rollout", "from", "to",
                                                            "status", "run") if k in result)
        typer.echo(f"  {act['action']}: {act['outcome']}" + (f" ({detail})" if detail else ""))
    if res.lease_lost:
        typer.echo(f"{ref}: this watcher lost its lease during the round and stopped acting "
                   "(another watcher decides now)")
