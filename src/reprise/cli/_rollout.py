"""``reprise rollout ...``: start, status, list, promote, abort, analyze (canary, shadow and
blue-green deployments of a model alias; the API is ``reprise.serve``'s)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from reprise.cli import _render as render
from reprise.cli._fast import workspace as _ws

rollout_app = typer.Typer(
    help="Deployments: canary, shadow and blue-green rollouts with automatic rollback.",
    no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
AliasOpt = Annotated[str | None, typer.Option(
    help="The alias of the rollout (needed only when the model has several running).")]


def _steps(text: str | None) -> list[int] | None:
    from reprise.core.errors import UserError

    if text is None:
        return None
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise UserError(f"--steps takes whole percentages separated by commas, e.g. "
                        f"5,25,50,100; got {text!r}") from None


def _version(value: str) -> int:
    from reprise.core.errors import UserError

    text = value.removeprefix("v")
    if not (text.isascii() and text.isdigit()):
        raise UserError(f"CANDIDATE must be a version number such as 3; got {value!r}")
    return int(text)


@rollout_app.command("start")
def start(
    name: Annotated[str, typer.Argument(help="Model name.")],
    candidate: Annotated[str, typer.Argument(help="The version to roll out.")],
    alias: Annotated[str, typer.Option(help="The alias to move.")] = "production",
    strategy: Annotated[str, typer.Option(help="canary, shadow or blue-green.")] = "canary",
    steps: Annotated[str | None, typer.Option(
        help="Canary weights in percent, e.g. 5,25,50,100 (the default).")] = None,
    interval: Annotated[str, typer.Option(
        help="Least time between decisions: 250ms, 60s, 5m, 1h.")] = "60s",
    policy: Annotated[Path | None, typer.Option(
        help="Policy YAML (checks and limits); default: the built-in policy.")] = None,
    key_header: Annotated[str | None, typer.Option(
        help="Sticky routing: requests with the same value of this header reach the same "
             "version.")] = None,
    key_column: Annotated[str | None, typer.Option(
        help="Sticky routing by this input column.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Roll out although the evaluation gates did not pass.")] = False,
    reason: Annotated[str | None, typer.Option(
        help="Why --force (recorded in the audit log).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Start moving ALIAS of NAME to CANDIDATE; servers following NAME@ALIAS pick it up.
    The candidate must load, answer its example and take the stable version's inputs."""
    from reprise.serve import start_rollout

    rec = start_rollout(name, _version(candidate), alias=alias, strategy=strategy,
                        steps=_steps(steps), interval=interval, policy=policy,
                        key_header=key_header, key_column=key_column, force=force,
                        reason=reason, workspace=_ws())
    if as_json:
        render.print_json(rec.to_dict())
        return
    plan = {"canary": "weights " + " -> ".join(f"{w}%" for w in rec.steps),
            "shadow": "shadow copies only", "blue-green": "shadow, then 100% with the "
                                                          "stable version kept warm"}
    typer.echo(f"rollout {rec.id} started: {rec.ref} {rec.stable} -> {rec.candidate} "
               f"({rec.strategy}: {plan[rec.strategy]}; a decision every "
               f"{rec.interval_s:g} s at most)")


@rollout_app.command("status")
def status(name: Annotated[str, typer.Argument(help="Model name.")],
           alias: AliasOpt = None, as_json: JsonOpt = False) -> None:
    """The running (else the latest) rollout of NAME: step, weights, each version's
    metrics in the current window, the checks, the time to the next decision, and the
    decisions so far."""
    from reprise.cli._drift_check import install_input_drift_check
    from reprise.serve import rollout_status

    ws = _ws()
    install_input_drift_check(ws)
    info = rollout_status(name, alias, workspace=ws)
    if as_json:
        render.print_json(info)
        return
    _show_status(info)


def _show_status(info: dict[str, Any]) -> None:
    r = info["rollout"]
    where = (f"step {r['step'] + 1} of {len(r['steps'])}" if r["strategy"] == "canary"
             else f"phase {r['phase']}")
    typer.echo(f"{info['ref']}: {r['strategy']} {r['stable']} -> {r['candidate']}, "
               f"{r['state']}, {where}, candidate weight {r['weight']:g}%"
               f"{' (shadow copies)' if info['shadow'] else ''}  [rollout {r['id']}]")
    if r["reason"]:
        typer.echo(f"reason: {r['reason']}")
    if info["next"] is not None:
        typer.echo(f"next decision in {info['next_decision_in']:.0f} s "
                   f"(now: {info['next']['action']}: {info['next']['reason']})")
    rows = []
    for role in ("stable", "candidate"):
        v = info["versions"][role]
        rows.append([v["version"], role, f"{info['weights'][str(v['version'])]:g}%",
                     v["requests"], v["errors"], _pct(v["error_rate"]), _ms(v["p50_ms"]),
                     _ms(v["p99_ms"]), _pct(v["agreement"]),
                     v["shadow_dropped"] or "-"])
    render.table(["version", "role", "weight", "requests", "errors", "error rate", "p50",
                  "p99", "agreement", "dropped"], rows, title="current window")
    if info["checks"]:
        render.table(["check", "verdict", "detail"],
                     [[c["name"], c["verdict"], c["message"]] for c in info["checks"]],
                     title="checks", keep=("check", "verdict"))
    render.table(["#", "time", "decision", "weight", "by", "reason"],
                 _decision_rows(info["decisions"]), title="decisions")


def _decision_rows(decisions: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per decision, except that holds in a row waiting for data are one row
    (the numbers of the first and the last, the last one's count): a step that gathers
    its sample slowly holds once per interval, and `--json` and the audit log keep each."""
    rows: list[list[Any]] = []
    waits = 0
    for d in decisions:
        reason = d["reason"] or "-"
        waiting = d["action"] == "rollout.hold" and reason.startswith("insufficient data")
        waits = waits + 1 if waiting else 0
        seq = str(d["seq"])
        if waits > 1:  # replaces the row of the same wait above, keeping its first number
            seq = f"{rows.pop()[0].split('-')[0]}-{seq}"
            reason = f"{waits} holds, the last: {reason}"
        rows.append([seq, render.timestamp(d["time"]), d["action"].removeprefix("rollout."),
                     "-" if d["weight"] is None else f"{d['weight']:g}%", d["actor"], reason])
    return rows


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2%}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} ms"


@rollout_app.command("list")
def list_(name: Annotated[str | None, typer.Argument(help="Only this model's.")] = None,
          running: Annotated[bool, typer.Option("--running", help="Only running ones.")] = False,
          as_json: JsonOpt = False) -> None:
    """Rollouts, newest first."""
    from reprise.serve import list_rollouts

    recs = list_rollouts(name, running_only=running, workspace=_ws())
    if as_json:
        render.print_json([r.to_dict() for r in recs])
        return
    if not recs:
        typer.echo("No running rollouts." if running else
                   "No rollouts yet. Start one with `reprise rollout start NAME VERSION`.")
        return
    render.table(["id", "alias", "versions", "strategy", "state", "weight", "started",
                  "reason"],
                 [[r.id, r.ref, f"{r.stable} -> {r.candidate}", r.strategy, r.state,
                   f"{r.weight:g}%", render.ago(r.created_at), r.reason or "-"] for r in recs],
                 keep=("id", "alias"))


@rollout_app.command("promote")
def promote(name: Annotated[str, typer.Argument(help="Model name.")],
            alias: AliasOpt = None,
            reason: Annotated[str | None, typer.Option(
                help="Why (recorded in the audit log).")] = None,
            as_json: JsonOpt = False) -> None:
    """Skip to the end: the candidate takes the alias now (audited)."""
    from reprise.serve import promote_rollout

    rec = promote_rollout(name, alias, reason=reason, workspace=_ws())
    if as_json:
        render.print_json(rec.to_dict())
        return
    typer.echo(f"{rec.ref} -> {rec.candidate} (was {rec.stable}); rollout {rec.id} promoted")


@rollout_app.command("abort")
def abort(name: Annotated[str, typer.Argument(help="Model name.")],
          alias: AliasOpt = None,
          reason: Annotated[str | None, typer.Option(
              help="Why (recorded in the audit log).")] = None,
          as_json: JsonOpt = False) -> None:
    """Stop the rollout: the candidate gets no more traffic; the alias stays."""
    from reprise.serve import abort_rollout

    rec = abort_rollout(name, reason, alias, workspace=_ws())
    if as_json:
        render.print_json(rec.to_dict())
        return
    typer.echo(f"rollout {rec.id} aborted; {rec.ref} stays at {rec.stable}")


@rollout_app.command("analyze")
def analyze(name: Annotated[str, typer.Argument(help="Model name.")],
            alias: AliasOpt = None, as_json: JsonOpt = False) -> None:
    """Run one analysis now and apply its decision (what a server's decider does every
    poll; useful without a server, or from a scheduler)."""
    from reprise.cli._drift_check import install_input_drift_check
    from reprise.serve import analyze_once

    ws = _ws()
    install_input_drift_check(ws)
    d = analyze_once(name, alias, time.time(), workspace=ws)
    if as_json:
        render.print_json(d.to_dict())
        return
    done = "" if d.action == "wait" else (" (applied)" if d.applied
                                          else " (not applied: another decision came first)")
    typer.echo(f"{d.action}{done}: {d.reason}")
