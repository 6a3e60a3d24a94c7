"""``reprise run``: shared by the Typer command and the fast path in ``reprise.cli.main``.

The fast path exists because ``reprise run`` on an unchanged pipeline is the
command users repeat most, and Typer (with click and pydantic behind it) costs
more start-up time than the whole cached run. ``main`` parses ``run`` with
argparse (standard library) and calls :func:`run_command` directly; ``--help``
still goes through Typer so there is one help text. Both parsers accept the same
options; ``tests/e2e`` runs the same cases through each.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["PROGRESS_MODES", "fast_parser", "run_command"]

PROGRESS_MODES = ("auto", "live", "lines", "none")


def run_command(target: str, *, params: list[str], seed: int, workers: int | None,
                no_cache: bool, force: list[str], steps: list[str], progress: str,
                as_json: bool) -> int:
    """Run a pipeline from the command line; return the exit code (1 if a step failed)."""
    from reprise.cli._render import parse_pairs, print_json
    from reprise.core.errors import UserError
    from reprise.pipeline._load import load_pipeline
    from reprise.pipeline._progress import make_progress
    from reprise.pipeline._runner import StepFailedError, run_pipeline
    from reprise.tracking import open_workspace

    if progress not in PROGRESS_MODES:
        raise UserError(f"--progress must be auto, live, lines or none, not {progress!r}.")
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be 1 or more, not {workers}.")
    ws = open_workspace()
    pipe = load_pipeline(target)
    values = parse_pairs(params, "-p")
    try:
        result = run_pipeline(pipe, values, seed=seed, workers=workers, cache=not no_cache,
                              force=force, workspace=ws, steps=steps or None,
                              progress=make_progress("none" if as_json else progress))
    except StepFailedError as exc:
        print(exc.error, file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if as_json:
        print_json({"run_id": result.run_id, "status": result.status,
                    "executed": result.executed, "reused": result.reused,
                    "duration": result.duration, "time_saved": result.time_saved,
                    "outputs": result.output_hashes()})
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # same shape as click's usage errors, exit 2
        sys.stderr.write(f"Usage: reprise run [OPTIONS] TARGET\nTry 'reprise run --help' for help.\n"
                         f"\nError: {message}\n")
        sys.exit(2)


def fast_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="reprise run", add_help=False, allow_abbrev=False)
    ap.add_argument("target")
    ap.add_argument("-p", "--param", action="append", default=[])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--force", action="append", default=[])
    ap.add_argument("--step", action="append", default=[])
    ap.add_argument("--progress", default="auto")
    ap.add_argument("--json", action="store_true", dest="as_json")
    return ap


def fast_run(argv: list[str]) -> int:
    ns = fast_parser().parse_args(argv)
    return run_command(ns.target, params=ns.param, seed=ns.seed, workers=ns.workers,
                       no_cache=ns.no_cache, force=ns.force, steps=ns.step,
                       progress=ns.progress, as_json=ns.as_json)
