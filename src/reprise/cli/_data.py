"""``reprise data ...``: dataset versions, schemas, profiles and diffs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reprise.cli import _render as render
from reprise.cli._fast import DELIMITER_HELP, NA_HELP
from reprise.cli._fast import workspace as _ws

data_app = typer.Typer(help="Versioned, validated datasets: add, list, show, diff, schema.",
                       no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@data_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Dataset name (letters, digits, . _ -).")],
    path: Annotated[Path, typer.Argument(help="CSV, Parquet, JSON Lines file, or a folder.")],
    schema: Annotated[str | None, typer.Option(
        help="pandera schema (FILE.py:NAME, or a YAML/JSON file); attached to NAME.")] = None,
    quarantine: Annotated[bool, typer.Option(
        "--quarantine", help="Set failing rows aside and register the valid rest.")] = False,
    fmt: Annotated[str | None, typer.Option(
        "--format", help="csv, parquet, jsonl, files or file (default: from the name).")] = None,
    encoding: Annotated[str, typer.Option(help="Text encoding of CSV files.")] = "utf-8",
    allow_type_change: Annotated[bool, typer.Option(
        "--allow-type-change", help="Accept column types that differ from the last version.")
    ] = False,
    link: Annotated[bool, typer.Option(
        "--link", help="Hard-link the file (or the folder's files) into the store instead of "
        "copying (the files become read-only).")] = False,
    na_values: Annotated[str | None, typer.Option(
        "--na-values", help=NA_HELP)] = None,
    delimiter: Annotated[str | None, typer.Option(
        "--delimiter", help=DELIMITER_HELP)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Register PATH as the next version NAME@N (unchanged content keeps the current one)."""
    from reprise.cli._fast import data_add_command

    code = data_add_command(name, str(path), schema=schema, quarantine=quarantine, fmt=fmt,
                            encoding=encoding, allow_type_change=allow_type_change,
                            as_json=as_json, link=link, na_values=na_values,
                            delimiter=delimiter)
    if code:
        raise typer.Exit(code)


@data_app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """Datasets with their newest version."""
    from reprise.cli._listing import data_list_command

    data_list_command(as_json=as_json)


@data_app.command("show")
def show(
    ref: Annotated[str, typer.Argument(metavar="NAME[@N]", help="Dataset version (default: newest).")],
    as_json: JsonOpt = False,
) -> None:
    """A version's source, schema, validation and profile."""
    from reprise.data._dataset import get_dataset, parse_ref

    ws = _ws()
    rec = get_dataset(ref, workspace=ws)
    if as_json:
        versions = ws.metadata.list_dataset_versions(parse_ref(ref)[0])
        render.print_json({"dataset": rec.ref, "name": rec.name, "version": rec.version,
                           "hash": rec.artifact_hash, "format": rec.format, "rows": rec.rows,
                           "schema": rec.schema, "profile": rec.profile, "meta": rec.meta,
                           "created_at": rec.created_at,
                           "versions": [v.version for v in versions]})
        return
    render.dataset_detail(rec)


@data_app.command("diff")
def diff(
    old: Annotated[str, typer.Argument(metavar="NAME@A")],
    new: Annotated[str, typer.Argument(metavar="NAME@B")],
    as_json: JsonOpt = False,
) -> None:
    """Schema changes, row counts and column statistics between two versions."""
    from reprise.data._dataset import diff_datasets

    out = diff_datasets(old, new, workspace=_ws())
    if as_json:
        render.print_json(out)
        return
    render.dataset_diff(out)


@data_app.command("checkout")
def checkout(
    ref: Annotated[str, typer.Argument(metavar="NAME[@N]", help="Dataset version (default: newest).")],
    dest: Annotated[Path, typer.Argument(help="Where to write it: a new or empty folder for "
                                               "folder datasets, else a file or folder.")],
) -> None:
    """Write a version back out: a folder dataset as its folder, any other as its file."""
    from reprise.data._dataset import checkout_dataset

    out = checkout_dataset(ref, dest, workspace=_ws())
    typer.echo(f"wrote {ref} to {out}")


@data_app.command("schema")
def schema(
    name: Annotated[str, typer.Argument(help="Dataset name.")],
    spec: Annotated[str | None, typer.Argument(
        metavar="[SCHEMA]", help="FILE.py:NAME or a pandera YAML/JSON file; omit to show.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Attach a pandera schema to a dataset name (enforced by every later add), or show it."""
    from reprise.core.errors import UserError
    from reprise.data._dataset import attach_schema, validate_name

    ws = _ws()
    validate_name(name)
    if spec is not None:
        stored, source = attach_schema(name, spec, workspace=ws)
        typer.echo(f"schema attached to {name!r} "
                   f"({'stored' if stored else 'loaded from ' + str(source) + ' each time'})")
        return
    found = ws.metadata.get_dataset_schema(name)
    if found is None:
        raise UserError(f"no schema is attached to {name!r}; attach one with "
                        f"`reprise data schema {name} FILE.py:SCHEMA`.")
    stored, source = found
    if as_json:
        import json

        render.print_json({"name": name, "source": source,
                           "spec": json.loads(stored) if stored else None})
        return
    typer.echo(f"source: {source or '-'}")
    typer.echo(stored or "(custom checks: loaded from the source each time)")
