"""Read-only listing commands (``runs list``, ``runs show``, ``data list``, ``models
list``), shared by the Typer commands and the fast path in ``reprise.cli.main``.

They are on the fast path (see ``_fast``) because they are what users type between
runs, and Typer's start-up cost more than the query on a 10,000-run workspace.
They read through ``Workspace.reader``, which on the embedded SQLite database does
without SQLAlchemy.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["data_list_command", "data_list_parser", "models_list_command",
           "models_list_parser", "runs_list_command", "runs_list_parser",
           "run_parsed", "runs_show_command", "runs_show_parser"]


def runs_list_command(*, name: str | None, status: str | None, tag: list[str],
                      sort: str | None, asc: bool, limit: int, all_runs: bool,
                      columns: str | None = None, as_json: bool) -> int:
    """List runs, newest first (or by a metric's final value). The id shown is the
    shortest prefix that names the run alone (8 characters or more)."""
    from reprise.cli import _render as render
    from reprise.cli._fast import workspace
    from reprise.tracking._query import list_runs, short_run_ids

    if columns is not None:
        from reprise.cli._runs_table import parse_columns

        parse_columns(columns)  # a typo fails before the query
    ws = workspace()
    rows = list_runs(ws, name=name, status=status, tags=render.parse_pairs(tag, "--tag"),
                     sort_metric=sort, ascending=asc, limit=limit or None,
                     include_children=all_runs)
    if as_json:
        render.print_json(rows)
    else:
        render.runs_table(rows, short_run_ids(ws, [r["id"] for r in rows]), sort, columns)
    return 0


def runs_show_command(run: str, *, as_json: bool) -> int:
    """Show one run: status, params, final metrics, artifacts."""
    from reprise.cli import _render as render
    from reprise.cli._fast import workspace
    from reprise.tracking._query import describe_run

    info = describe_run(workspace(), run)
    if as_json:
        render.print_json(info)
    else:
        render.run_detail(info)
    return 0


def data_list_command(*, as_json: bool) -> int:
    """Datasets with their newest version."""
    from reprise.cli import _render as render
    from reprise.cli._fast import workspace
    from reprise.data._dataset import summarise_datasets

    rows = summarise_datasets(workspace=workspace())
    if as_json:
        render.print_json(rows)
    elif not rows:
        print("No datasets yet. Add one with `reprise data add NAME PATH`.")
    else:
        render.table(["name", "latest", "versions", "format", "rows", "size", "added"],
                     [[r["name"], f"@{r['latest']}", r["versions"], r["format"],
                       "-" if r["rows"] is None else r["rows"],
                       "-" if r["size"] is None else render.human_bytes(r["size"]),
                       render.ago(r["created_at"])] for r in rows], keep=("name", "latest"))
    return 0


def models_list_command(*, as_json: bool) -> int:
    """Models with their versions and aliases."""
    from reprise.cli import _render as render
    from reprise.cli._fast import workspace
    from reprise.registry._registry import list_models

    rows = list_models(workspace())  # the reader ingests pending journals first
    if as_json:
        render.print_json(rows)
    elif not rows:
        print("No models yet. Register one with `reprise models register NAME --run RUN`.")
    else:
        render.table(["model", "versions", "latest", "aliases", "updated"],
                     [[r["name"], r["versions"], r["latest"],
                       ", ".join(f"{a}→{v}" for a, v in r["aliases"].items()) or "-",
                       render.ago(r["updated"])] for r in rows], keep=("model",))
    return 0


def _parser(prog: str, usage: str = "") -> argparse.ArgumentParser:
    from reprise.cli._fast import Parser

    return Parser(prog=f"reprise {prog}", usage=usage, add_help=False, allow_abbrev=False)


def runs_list_parser() -> argparse.ArgumentParser:
    ap = _parser("runs list")
    ap.add_argument("--name", default=None)
    ap.add_argument("--status", default=None)
    ap.add_argument("--tag", action="append", default=[])
    ap.add_argument("--sort", default=None)
    ap.add_argument("--asc", action="store_true")
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--all", action="store_true", dest="all_runs")
    ap.add_argument("--columns", default=None)
    ap.add_argument("--json", action="store_true", dest="as_json")
    return ap


def runs_show_parser() -> argparse.ArgumentParser:
    ap = _parser("runs show", "RUN")
    ap.add_argument("run")
    ap.add_argument("--json", action="store_true", dest="as_json")
    return ap


def data_list_parser() -> argparse.ArgumentParser:
    ap = _parser("data list")
    ap.add_argument("--json", action="store_true", dest="as_json")
    return ap


def models_list_parser() -> argparse.ArgumentParser:
    ap = _parser("models list")
    ap.add_argument("--json", action="store_true", dest="as_json")
    return ap


def run_parsed(make_parser: Callable[[], argparse.ArgumentParser],
               command: Callable[..., int], argv: list[str]) -> int:
    """Parse ``argv`` with a parser from ``make_parser`` and call ``command``:
    positional arguments by position, options by keyword."""
    parser = make_parser()
    ns = vars(parser.parse_args(argv))
    positional = [ns.pop(a.dest) for a in parser._actions if not a.option_strings]
    return command(*positional, **ns)
