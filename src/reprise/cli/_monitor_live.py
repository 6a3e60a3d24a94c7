"""``reprise monitor NAME[@alias]`` (the ``show`` command): the newest live windows of a
served model — input drift per column, prediction drift, performance, alarms — and the
live variant of ``reprise monitor report``. The API is ``reprise.monitor._live``."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from reprise.cli import _render as render
from reprise.cli._fast import workspace as _ws

if TYPE_CHECKING:
    from reprise.monitor._live import LiveReport, LiveWindow

__all__ = ["ModelRefGroup", "add_live_commands", "check_logged", "live", "window_line"]

WindowOpt = Annotated[str | None, typer.Option(
    "--window", help="Rows per window (default 1000) or a duration (30s, 15m, 1h, 2d).")]
WindowsOpt = Annotated[int, typer.Option("--windows", help="How many newest windows.")]
ReferenceOpt = Annotated[str | None, typer.Option(
    "--reference", metavar="DATASET@N",
    help="Reference rows (default: the model version's training dataset).")]
SinceOpt = Annotated[str | None, typer.Option(
    help="Ignore traffic before this: a duration ago (30m, 24h, 7d) or an ISO date/time.")]


class ModelRefGroup(TyperGroup):
    """``reprise monitor NAME[@alias] ...`` means ``reprise monitor show NAME[@alias] ...``:
    a first word that is neither a subcommand, nor close to one (a typo keeps click's
    "No such command"), nor an option selects ``show``."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name = args[0] if args else ""
        if (name and name not in self.commands and not name.startswith("-")
                and not difflib.get_close_matches(name, list(self.commands), n=1,
                                                  cutoff=0.8)):
            return "show", self.commands["show"], args
        return super().resolve_command(ctx, args)


def live(ref: str, window: str | None, windows: int, reference: str | None,
         since: str | None, policy: Any) -> LiveReport:
    from reprise.cli._monitor_log import parse_time
    from reprise.monitor._live import live_report

    return live_report(ref, window=window, windows=windows,
                       since=parse_time(since, "--since"), workspace=_ws(), policy=policy,
                       reference=reference)


def show(
    ref: Annotated[str, typer.Argument(metavar="NAME[@ALIAS|:VERSION]",
                                       help="The served model version to monitor.")],
    window: WindowOpt = None,
    windows: WindowsOpt = 1,
    reference: ReferenceOpt = None,
    since: SinceOpt = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="YAML drift policy (alpha, correction, min_rows, ks_max_rows, k, "
        "columns).")] = None,
    fail_on_alarm: Annotated[bool, typer.Option(
        "--fail-on-alarm", help="Exit 1 when a window raises an alarm.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")
                       ] = False,
) -> None:
    """The newest live windows of a model's logged traffic: input drift per column,
    prediction drift, performance (when labels arrived) and alarms. A report: exits 0
    even when drifting, unless --fail-on-alarm."""
    from reprise.monitor import load_drift_policy

    pol = load_drift_policy(policy) if policy is not None else None
    out = live(ref, window, windows, reference, since, pol)
    if not out.windows:
        check_logged(out, ref)
    if as_json:
        render.print_json(out.to_dict())
    else:
        _print(out)
    if fail_on_alarm and out.alarms:
        raise typer.Exit(1)


def check_logged(out: LiveReport, ref: str) -> None:
    """Raise a user error when the version behind ``ref`` never logged a request: nothing
    can ever be judged, so this is the wrong version or a server without its log (an empty
    time range of a version that did log is a report, not an error)."""
    from reprise.core.errors import UserError

    if _ws().metadata.list_request_chunks(out.model, version=out.version):
        return
    raise UserError(
        f"{out.model}:{out.version} has no logged requests: serve it (`reprise serve "
        f"{ref}`: the request log is on unless --no-request-log) and send requests; "
        "they are written every --log-flush-s seconds (10 by default).")


def window_line(w: LiveWindow) -> str:
    from datetime import datetime

    def at(t: float) -> str:
        return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")

    v = w.verdicts
    return (f"{at(w.window.start)} .. {at(w.window.end)}: {w.window.rows} rows, "
            f"{w.window.labelled} labelled — inputs {v['input_drift']}, predictions "
            f"{v['prediction_drift']}, performance {v['performance']}")


def _print(out: LiveReport) -> None:
    from reprise.cli._monitor import _cell

    ref = out.reference
    typer.echo(f"{out.model}:{out.version}"
               + (f" (@{out.alias})" if out.alias else "")
               + f" against {ref['dataset']} ({ref['reference_rows']} rows; reference "
                 f"predictions: {ref['predictions']}, {ref['sample_rows']} rows)")
    if not out.windows:
        typer.echo(f"no logged traffic of {out.model}:{out.version} in that range: "
                   "nothing to judge")
        return
    for w in out.windows:
        typer.echo(window_line(w))
    newest = out.windows[-1]
    header = ["column", "verdict", "test", "statistic", "p adj.", "effect", "missing",
              "unseen"]
    render.table(header, [_cell(c) for c in newest.input.columns],
                 title=f"inputs, newest window ({newest.window.rows} rows)", keep=("column",))
    render.table(header, [_cell(c) for c in newest.prediction.columns],
                 title="predictions, newest window", keep=("column",))
    perf = newest.performance
    if perf.get("metrics"):
        render.table(["metric", "value", "interval", "reference", "degraded"],
                     [[m, _g(e.get("value")), f"[{_g(e.get('ci_low'))}, {_g(e.get('ci_high'))}]",
                       _g(e.get("reference")), "yes" if e.get("degraded") else "no"]
                      for m, e in perf["metrics"].items()],
                     title=f"performance on {perf['labelled']} labelled rows: {perf['verdict']}")
    elif perf.get("reason"):
        typer.echo(f"performance: {perf['reason']}")
    for a in out.alarms:
        typer.echo(f"ALARM {a.kind} {a.id}: {a.message}")
    if not out.alarms:
        typer.echo("no alarm")


def _g(v: Any) -> str:
    return "-" if v is None else f"{v:.3g}"


def add_live_commands(app: typer.Typer) -> None:
    app.command("show")(show)
