"""The ``reprise`` command line: parse, call the public API, render.

No domain logic lives here (DVC's ``commands/`` over ``repo/`` habit). Heavy
modules are imported inside the commands so that ``reprise --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reprise.cli import _render as render
from reprise.cli._data import data_app
from reprise.cli._export import export_app
from reprise.cli._fast import workspace as _ws
from reprise.cli._models import audit_app, models_app
from reprise.cli._models import predict as _predict
from reprise.cli._monitor import monitor_app
from reprise.cli._rollout import rollout_app
from reprise.cli._serve import serve
from reprise.cli._tune import tune_app
from reprise.cli._ui import ui

app = typer.Typer(
    name="reprise",
    help="Reproducible, cached, traceable ML pipelines. Start with `reprise init`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
runs_app = typer.Typer(help="List, show and compare runs.", no_args_is_help=True)
env_app = typer.Typer(help="Show and compare environment fingerprints.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
app.add_typer(env_app, name="env")
app.add_typer(data_app, name="data")
app.add_typer(tune_app, name="tune")
app.command()(serve)
app.command()(ui)
app.add_typer(models_app, name="models")
app.add_typer(audit_app, name="audit")
app.add_typer(rollout_app, name="rollout")
app.add_typer(monitor_app, name="monitor")
app.add_typer(export_app, name="export")
app.command("predict")(_predict)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ExecutorOpt = Annotated[str | None, typer.Option(
    help="Where steps run: local (processes here) or ray (a Ray cluster). Default: [executor] "
         "kind in .reprise/config.toml, else local.")]
RayAddressOpt = Annotated[str | None, typer.Option(
    help="Ray cluster for --executor ray: auto, HOST:PORT or ray://HOST:PORT. Default: "
         "[executor] address, else a Ray instance started on this machine.")]


def _version(value: bool) -> None:
    if value:
        from reprise import __version__

        typer.echo(f"reprise {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Reprise: reproducible, cached, traceable ML pipelines."""


@app.command()
def init(
    path: Annotated[Path, typer.Argument(help="Folder to create the workspace in.")] = Path("."),
) -> None:
    """Create a workspace (.reprise/ with database, artifact folder, config.toml)."""
    from reprise.tracking import init as init_workspace

    ws = init_workspace(path)
    _ = ws.metadata  # create the database now, so a broken store URL fails here
    typer.echo(f"Initialised Reprise workspace in {ws.root / '.reprise'}")


@runs_app.command("list")
def runs_list(
    name: Annotated[str | None, typer.Option(help="Only runs with this name.")] = None,
    status: Annotated[str | None, typer.Option(
        help="running, finished, failed or killed.")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="KEY=VALUE; repeatable.")] = None,
    sort: Annotated[str | None, typer.Option(help="Sort by this metric's final value.")] = None,
    asc: Annotated[bool, typer.Option("--asc", help="Ascending order.")] = False,
    limit: Annotated[int, typer.Option(help="At most this many runs (0: all).")] = 50,
    all_runs: Annotated[bool, typer.Option("--all", help="Include nested runs.")] = False,
    columns: Annotated[str | None, typer.Option(
        help="Columns to show, comma-separated: id, name, status, age, started, duration, "
             "metric:KEY, param:KEY, tag:KEY (default: what fits the terminal).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List runs, newest first. The id shown is the shortest prefix that names the run
    alone (8 characters or more): every command taking a RUN accepts it."""
    from reprise.cli._listing import runs_list_command

    runs_list_command(name=name, status=status, tag=tag or [], sort=sort, asc=asc, limit=limit,
                      all_runs=all_runs, columns=columns, as_json=as_json)


@runs_app.command("show")
def runs_show(run: Annotated[str, typer.Argument(help="Run id (unique prefix is enough).")],
              as_json: JsonOpt = False) -> None:
    """Show one run: status, params, final metrics, artifacts."""
    from reprise.cli._listing import runs_show_command

    runs_show_command(run, as_json=as_json)


@runs_app.command("compare")
def runs_compare(a: Annotated[str, typer.Argument(help="First run.")],
                 b: Annotated[str, typer.Argument(help="Second run.")],
                 as_json: JsonOpt = False) -> None:
    """Compare two runs: params, final metrics, environment."""
    from reprise.tracking import compare_runs

    cmp = compare_runs(_ws(), a, b)
    render.print_json(cmp) if as_json else render.comparison(cmp)


@env_app.command("show")
def env_show(run: Annotated[str | None, typer.Argument(
                 help="Run id; omit for the current environment.")] = None,
             as_json: JsonOpt = False) -> None:
    """Show the environment fingerprint of a run (or of this machine now)."""
    if run is None:
        from reprise.env import fingerprint, fingerprint_hash

        fp = fingerprint(Path.cwd())
        env_hash = fingerprint_hash(fp)
    else:
        store = _ws().metadata
        rec = store.get_run(run)
        if rec.env_hash is None:
            from reprise.core.errors import UserError

            raise UserError(f"run {rec.id} has no recorded environment.")
        env_hash, fp = rec.env_hash, store.get_environment(rec.env_hash)
    if as_json:
        render.print_json({"hash": env_hash, "fingerprint": fp})
    else:
        render.environment(env_hash, fp)


@env_app.command("diff")
def env_diff(a: Annotated[str, typer.Argument(help="First run.")],
             b: Annotated[str, typer.Argument(help="Second run.")],
             as_json: JsonOpt = False) -> None:
    """What changed in the environment between two runs."""
    from reprise.tracking import env_diff as diff

    changes = diff(_ws(), a, b)
    render.print_json(changes) if as_json else render.env_changes(changes)


@app.command()
def fsck(
    no_verify: Annotated[bool, typer.Option("--no-verify",
                                            help="Check presence and size only.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Find missing or corrupted blobs in the artifact store. Exit 1 if any."""
    report = _ws().fsck(verify_hashes=not no_verify)
    if as_json:
        render.print_json({"ok": report.ok, "checked": report.checked,
                           "missing": report.missing, "corrupted": report.corrupted,
                           "unrecorded": report.unrecorded})
    else:
        render.fsck_report(report)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would go.")] = False,
    grace: Annotated[float, typer.Option(
        help="Keep unreferenced blobs younger than this many seconds.")] = 3600.0,
    as_json: JsonOpt = False,
) -> None:
    """Remove blobs that nothing references."""
    report = _ws().gc(dry_run=dry_run, grace_seconds=grace)
    if as_json:
        render.print_json({"dry_run": report.dry_run, "removed": report.removed,
                           "bytes_freed": report.bytes_freed, "kept_recent": report.kept_recent,
                           "temp_files_removed": report.temp_files_removed})
    else:
        verb = "Would remove" if dry_run else "Removed"
        typer.echo(f"{verb} {len(report.removed)} blob(s), {render.human_bytes(report.bytes_freed)}"
                   f"; kept {report.kept_recent} recent unreferenced blob(s).")



@runs_app.command("checkout")
def runs_checkout(run: Annotated[str, typer.Argument(help="Run id (unique prefix is enough).")],
                  dest: Annotated[Path, typer.Argument(help="Folder to write the code into.")],
                  ) -> None:
    """Write out the code snapshot of a pipeline run."""
    from reprise.core.errors import UserError
    from reprise.store import load_object

    ws = _ws()
    rec = ws.metadata.get_run(run)
    art = ws.metadata.run_artifacts(rec.id).get("code")
    if art is None:
        raise UserError(f"run {rec.id} has no code snapshot (only pipeline runs have one).")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UserError(f"{str(dest)!r} exists and is not an empty folder; choose a new one.")
    load_object(ws.artifacts, art.hash, art.materializer, art.meta, dest=dest)
    files = art.meta.get("files", [])
    typer.echo(f"Wrote {len(files)} file(s) of run {rec.id} to {dest}")


@app.command(context_settings={"allow_interspersed_args": True})
def run(
    target: Annotated[str, typer.Argument(help="FILE.py:PIPELINE or package.module:PIPELINE.")],
    param: Annotated[list[str] | None, typer.Option(
        "-p", "--param", help="Pipeline parameter KEY=VALUE; repeatable.")] = None,
    seed: Annotated[int, typer.Option(help="Run seed (split into per-step seeds).")] = 0,
    workers: Annotated[int | None, typer.Option(
        help="Parallel worker processes (default: CPU count; 1 runs in-process).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Execute every step.")] = False,
    force: Annotated[list[str] | None, typer.Option(
        help="Re-run this step and everything downstream; repeatable.")] = None,
    steps: Annotated[list[str] | None, typer.Option(
        "--step", help="Run only this step and what it needs; repeatable.")] = None,
    progress: Annotated[str, typer.Option(help="auto, live, lines or none.")] = "auto",
    as_json: JsonOpt = False,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Run a pipeline: unchanged steps are reused from the cache."""
    from reprise.cli._fast import run_command

    code = run_command(target, params=param or [], seed=seed, workers=workers,
                       no_cache=no_cache, force=force or [], steps=steps or [],
                       progress=progress, as_json=as_json, executor=executor,
                       ray_address=ray_address)
    if code:
        raise typer.Exit(code)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                "allow_interspersed_args": False})
def train(
    ctx: typer.Context,
    script: Annotated[Path, typer.Argument(help="Training script (uses reprise.train.Trainer).")],
    nproc: Annotated[int, typer.Option(
        "--nproc", "--nproc-per-node",
        help="Processes on this machine (per node); >1 launches DDP through torchrun.")] = 1,
    nnodes: Annotated[int, typer.Option(
        "--nnodes", help="Machines (nodes) taking part; run the same command on each.")] = 1,
    node_rank: Annotated[int | None, typer.Option(
        "--node-rank", help="This node's number, 0 to nnodes-1: node 0 hosts the "
                            "rendezvous at --rdzv-endpoint, the others connect to it.")] = None,
    rdzv_endpoint: Annotated[str | None, typer.Option(
        "--rdzv-endpoint", metavar="HOST:PORT",
        help="Where the nodes meet (torchrun's c10d rendezvous): node 0's address and a "
             "free port, the same on every node.")] = None,
    rdzv_id: Annotated[str | None, typer.Option(
        "--rdzv-id", help="Name of this job at the endpoint (default 'reprise'), the same "
                          "on every node.")] = None,
    local_addr: Annotated[str | None, typer.Option(
        "--local-addr", help="This node's address as the others reach it (default: its "
                             "host name; 127.0.0.1 on a loopback endpoint).")] = None,
    resume_allow_data_change: Annotated[bool, typer.Option(
        "--resume-allow-data-change",
        help="Let a Trainer resume although its training data changed since the "
             "checkpoint (refused otherwise).")] = False,
) -> None:
    """Run a training script, on N processes with DDP, on one machine or several
    (arguments after SCRIPT go to it).

    Every rank gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT); the Trainer shards the data by global rank and
    logs and checkpoints on global rank 0. On several machines run the same command
    on each with --nnodes, --rdzv-endpoint (and --node-rank); the checkpoint folder
    and the workspace must be reachable from every node. If a rank dies the others
    are stopped; run the same command again with resume="auto" in the script to
    continue.
    """
    from reprise.train._launch import launch
    from reprise.train._trainer_state import ALLOW_DATA_CHANGE_ENV

    env = {ALLOW_DATA_CHANGE_ENV: "1"} if resume_allow_data_change else None
    code = launch(script, list(ctx.args), nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                  rdzv_endpoint=rdzv_endpoint, rdzv_id=rdzv_id, local_addr=local_addr,
                  env=env)
    if code:
        raise typer.Exit(code if code > 0 else 128 - code)


@app.command()
def verify(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="Pipeline run to re-execute.")],
    steps: Annotated[list[str] | None, typer.Option(
        "--steps", help="Only this step (and what it needs); repeatable.")] = None,
    tolerance: Annotated[float | None, typer.Option(
        help="Numeric outputs within this absolute bound count as equal (never identical).")
    ] = None,
    workers: Annotated[int | None, typer.Option(help="Parallel worker processes.")] = None,
    as_json: JsonOpt = False,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Re-execute a run with the cache off and prove its outputs identical. Exit 1 if not."""
    import sys

    from reprise.pipeline._verify import verify_run

    report = verify_run(_ws(), run_id, steps=steps, tolerance=tolerance, workers=workers,
                        stream=None if as_json else sys.stderr, executor=executor,
                        ray_address=ray_address)
    if as_json:
        render.print_json(report.to_dict())
    else:
        render.verify_report(report)
    if not report.ok:
        raise typer.Exit(1)


_LINEAGE_FORMATS = ("steps", "tree", "mermaid", "dot", "json")


@app.command()
def lineage(
    ref: Annotated[str, typer.Argument(
        metavar="RUN|HASH|MODEL", help="Run id, artifact hash, or NAME@ALIAS / NAME:VERSION.")],
    fmt: Annotated[str, typer.Option(
        "--format", help="steps (each step once, in order), tree, mermaid, dot or json.")
    ] = "steps",
    tree_view: Annotated[bool, typer.Option(
        "--tree", help="The tree view: each output with its ancestors beneath it.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show where outputs came from: steps, inputs, down to the raw files."""
    from reprise.core.errors import UserError
    from reprise.pipeline._lineage import lineage as build
    from reprise.pipeline._lineage import to_dot, to_mermaid

    if fmt not in _LINEAGE_FORMATS:
        raise UserError(f"--format must be one of {', '.join(_LINEAGE_FORMATS)}, not {fmt!r}.")
    fmt = "json" if as_json else "tree" if tree_view else fmt
    ws = _ws()
    if "@" in ref or ":" in ref:  # a registered model: from its package down to the data
        from reprise.registry import model_lineage

        tree = model_lineage(ref, workspace=ws)
    else:
        tree = build(ws, ref)
    if fmt == "json":
        render.print_json(tree)
    elif fmt == "mermaid":
        typer.echo(to_mermaid(tree), nl=False)
    elif fmt == "dot":
        typer.echo(to_dot(tree), nl=False)
    elif fmt == "tree":
        render.lineage_tree(tree)
    else:
        from reprise.cli._lineage_view import print_lineage_steps
        from reprise.pipeline._lineage_dag import lineage_steps

        print_lineage_steps(tree, lineage_steps(ws, tree))


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="Run id (unique prefix is enough).")],
    step: Annotated[str | None, typer.Option(
        help="The pipeline step whose evaluation to show (when several logged one).")] = None,
    name: Annotated[str | None, typer.Option(
        help="The evaluation's name= (when one run or step holds several).")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="File to write (default: ./evaluation-<run8>.html).")] = None,
    open_it: Annotated[bool, typer.Option("--open", help="Open it in a web browser.")] = False,
) -> None:
    """Write the HTML evaluation report of a run (or of one of its pipeline steps)."""
    from reprise.core._atomic import atomic_write_bytes
    from reprise.evaluate._artifacts import load_report

    full_id, _, html = load_report(_ws(), run_id, step, name)
    path = output if output is not None else Path(f"evaluation-{full_id[:8]}.html")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, html)
    typer.echo(str(path))
    if open_it:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())
