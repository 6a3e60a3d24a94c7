"""``reprise tune ...``: search a pipeline's params on Optuna; list and show studies."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from reprise.cli import _render as render
from reprise.cli._fast import workspace as _ws


class _DefaultRun(TyperGroup):
    """``reprise tune FILE.py:PIPELINE ...`` means ``reprise tune run FILE.py:PIPELINE ...``:
    a first word that is not a subcommand (nor an option) selects ``run``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return list(super().parse_args(ctx, args))


tune_app = typer.Typer(cls=_DefaultRun, no_args_is_help=True,
                       help="Hyperparameter search on Optuna: `reprise tune FILE.py:PIPELINE "
                            "--space space.yaml --metric STEP/KEY`, `tune list`, `tune show`.")
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@tune_app.command("run")
def run(
    target: Annotated[str, typer.Argument(help="FILE.py:PIPELINE to tune.")],
    space: Annotated[Path, typer.Option(help="Search space, a YAML (or JSON) file.")],
    metric: Annotated[str, typer.Option(help="Run metric STEP/KEY to optimise, e.g. "
                                             "evaluate/f1.")],
    direction: Annotated[str, typer.Option(help="minimize or maximize.")] = "minimize",
    trials: Annotated[int | None, typer.Option(
        "--trials", help="The study's total number of trials.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds for this search.")] = None,
    workers: Annotated[int, typer.Option(
        help="Trials at once (processes, or Ray tasks with --executor ray).")] = 1,
    executor: Annotated[str | None, typer.Option(
        help="local (this machine's processes) or ray (each trial a Ray task; every node "
             "must see the workspace folder at the same path). Default: [executor] kind "
             "in .reprise/config.toml, else local.")] = None,
    ray_address: Annotated[str | None, typer.Option(
        help="Ray cluster for --executor ray: HOST:PORT of the head, auto, or "
             "ray://HOST:PORT (default: [executor] address in .reprise/config.toml, else "
             "RAY_ADDRESS, else a local Ray).")] = None,
    sampler: Annotated[str, typer.Option(help="tpe, random, grid or cmaes.")] = "tpe",
    pruner: Annotated[str, typer.Option(
        help="median, hyperband, successive_halving or none.")] = "median",
    prune_on: Annotated[str | None, typer.Option(
        help="Intermediate metric the pruner compares (default: the only one, or val_loss).")
    ] = None,
    warmup_steps: Annotated[int, typer.Option(
        help="Validations (or folds) before the median pruner judges a trial.")] = 0,
    study: Annotated[str | None, typer.Option(
        help="Study name (default: the pipeline's); an existing study is resumed.")] = None,
    reproducible: Annotated[bool, typer.Option(
        "--reproducible", help="Synchronous batches told in trial order: the same seed gives "
        "the same trials whatever --workers.")] = False,
    batch_size: Annotated[int, typer.Option(help="Trials per batch with --reproducible.")] = 4,
    seed: Annotated[int, typer.Option(help="Seed of the sampler and of every trial.")] = 0,
    param: Annotated[list[str] | None, typer.Option(
        "-p", "--param", help="Fixed pipeline parameter KEY=VALUE; repeatable.")] = None,
    catch: Annotated[bool, typer.Option(
        "--catch", help="Record failing trials and go on.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Tune a pipeline: each trial is a pipeline run with the trial's params."""
    from reprise.tune import tune

    fixed = render.parse_pairs(param or [], "-p")
    result = tune(target, str(space), n_trials=trials, timeout=timeout, direction=direction,
                  metric=metric, params=fixed, sampler=sampler,
                  pruner=None if pruner == "none" else pruner, prune_on=prune_on,
                  warmup_steps=warmup_steps, study=study,
                  workers=workers, executor=executor, ray_address=ray_address,
                  reproducible=reproducible, batch_size=batch_size, seed=seed,
                  catch=catch, workspace=_ws())
    if as_json:
        render.print_json(result.to_dict())
        return
    from reprise.tracking._query import short_run_ids

    short = short_run_ids(_ws(), [t["run_id"] for t in result.trials if t["run_id"]])
    _trials(result.trials, result.direction, short)
    best = (f"best trial {result.best_trial}: {result.best_value:.6g} with {result.best_params}"
            if result.best_trial is not None else "no complete trial")
    typer.echo(f"study {result.study}: {best}\ntuning run {result.run_id}; details: "
               f"reprise tune show {result.study}")


@tune_app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """Studies of this workspace, with their best value."""
    from reprise.tune import list_studies

    rows = list_studies(_ws())
    if as_json:
        render.print_json(rows)
        return
    if not rows:
        typer.echo("No studies yet. Start one with `reprise tune FILE.py:PIPELINE --space ...`.")
        return
    render.table(["study", "direction", "trials", "best value", "best params"],
                 [[r["study"], r["direction"], r["trials"], _value(r["best_value"]),
                   r["best_params"] or "-"] for r in rows], keep=("study",))


@tune_app.command("show")
def show(
    study: Annotated[str, typer.Argument(help="Study name (see `reprise tune list`).")],
    html: Annotated[Path | None, typer.Option(
        "--html", help="Write the study's report (history, parallel coordinates, "
        "importances; offline) to this file.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """One study: trials, best trial, parameter importances; --html writes the plots."""
    from reprise.tune import load_study, show_study, study_html

    ws = _ws()
    info = show_study(ws, study)
    if html is not None:
        from reprise.core._atomic import atomic_write_bytes

        atomic_write_bytes(html, study_html(load_study(ws, study), info).encode())
    if as_json:
        render.print_json(info)
        return
    from reprise.tracking._query import short_run_ids

    short = short_run_ids(ws, [t["run_id"] for t in info["trials"] if t["run_id"]])
    _trials(info["trials"], info["direction"], short)
    best = info["best"]
    typer.echo(f"study {info['study']} ({info['direction']}): {info['counts']}")
    if best:
        typer.echo(f"best trial {best['number']}: {best['value']:.6g} with {best['params']} "
                   f"(run {best['run_id']})")
    if info.get("importances"):
        render.table(["param", "importance"],
                     [[k, f"{v:.3f}"] for k, v in info["importances"].items()])
    if html is not None:
        typer.echo(f"report written to {html}")


def _trials(trials: list[dict[str, Any]], direction: str, short: dict[str, str]) -> None:
    keys = sorted({k for t in trials for k in t["params"]})
    render.table(["trial", "state", "value", *keys, "seconds", "run"],
                 [[t["number"], t["state"], _value(t["value"]),
                   *[t["params"].get(k, "") for k in keys],
                   f"{t['seconds']:.1f}" if t["seconds"] is not None else "-",
                   short.get(t["run_id"], "-")] for t in trials], title=f"trials ({direction})",
                 keep=("trial", "run"))


def _value(v: Any) -> str:
    return "-" if v is None else f"{v:.6g}"
