"""``reprise monitor requests | feedback | export-labelled | prune``: the request log and
feedback (the API is ``reprise.monitor``'s). ``add_request_log_commands`` attaches them
to the ``monitor`` command group, beside the drift statistics' commands."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from reprise.cli import _render as render
from reprise.cli._fast import workspace as _ws

__all__ = ["add_request_log_commands"]

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
SinceOpt = Annotated[str | None, typer.Option(
    help="From this time: a duration ago (30m, 24h, 7d) or an ISO date/time.")]
UntilOpt = Annotated[str | None, typer.Option(
    help="Up to this time: a duration ago (30m, 24h, 7d) or an ISO date/time.")]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(text: str | None, option: str, now: float | None = None) -> float | None:
    """``30m``/``24h``/``7d`` ago, or an ISO 8601 date or date-time (local time unless it
    names its offset), as Unix seconds."""
    from reprise.core.errors import UserError

    if text is None:
        return None
    now = time.time() if now is None else now
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise UserError(f"{option} takes a duration ago (30m, 24h, 7d) or an ISO date/time "
                        f"(2026-11-26 or 2026-11-26T14:00); got {text!r}") from None


def check_model(ref: str) -> None:
    """Refuse (exit 2, the registry's message) a ``NAME`` or ``NAME:VERSION`` that is not
    registered and has nothing in the request log: a typo would otherwise report an empty
    log, store labels no model will use, or write an empty export. A deleted version whose
    log is still kept passes."""
    from reprise.registry._registry import _versions, get_version, split_ref

    ws = _ws()
    name, _, version = split_ref(ref)
    if ws.metadata.list_request_chunks(name, version=version):
        return
    if version is None:
        _versions(ws, name)
    else:
        get_version(ws, name, version)


def requests(ref: Annotated[str, typer.Argument(help="NAME or NAME:VERSION.",
                                                 metavar="NAME[:VERSION]")],
             since: SinceOpt = None, until: UntilOpt = None, as_json: JsonOpt = False) -> None:
    """List the request log's chunks of a model: time range, rows, server, size."""
    from reprise.monitor import list_request_chunks

    chunks = list_request_chunks(ref, parse_time(since, "--since"),
                                 parse_time(until, "--until"), workspace=_ws())
    if as_json:
        render.print_json([c.to_dict() for c in chunks])
        return
    if not chunks:
        check_model(ref)
        typer.echo(f"no logged requests of {ref} in that time range")
        return
    render.table(["chunk", "version", "first", "last", "requests", "rows", "size", "server"],
                 [[c.id[:12], c.version, render.timestamp(c.first_at),
                   render.timestamp(c.last_at), c.requests, c.rows, render.human_bytes(c.size),
                   c.server] for c in chunks])


def feedback(name: Annotated[str, typer.Argument(help="Model name.")],
             file: Annotated[Path, typer.Argument(
                 help="CSV, Parquet or JSON lines with columns request_id and label.")],
             as_json: JsonOpt = False) -> None:
    """Store labels for logged predictions in bulk (joined to the request log by request
    id; a label sent again replaces the stored one)."""
    from reprise.monitor import add_feedback_file

    check_model(name)
    stored = add_feedback_file(name, file, workspace=_ws())
    if as_json:
        render.print_json({"model": name, "stored": stored})
    else:
        typer.echo(f"stored {stored} labels for {name}")


def export_labelled(
    name: Annotated[str, typer.Argument(help="Model name.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Parquet file to write.")],
    version: Annotated[int | None, typer.Option(help="Only this version's requests.")] = None,
    since: SinceOpt = None, until: UntilOpt = None,
    label_column: Annotated[str, typer.Option(help="Name of the label column.")] = "label",
    with_meta: Annotated[bool, typer.Option(
        "--with-meta", help="Add request_id, time, version and the model's outputs.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write the logged inputs that have a label, with the label, to Parquet (ready for
    `reprise data add`); columns excluded from the log (PII) are in no row."""
    from reprise.monitor import export_labelled as export

    check_model(name if version is None else f"{name}:{version}")
    report = export(name, output, version=version, start=parse_time(since, "--since"),
                    end=parse_time(until, "--until"), label_column=label_column,
                    with_meta=with_meta, workspace=_ws())
    if as_json:
        render.print_json(report.to_dict())
    else:
        typer.echo(f"wrote {report.rows} labelled rows (of {report.logged_rows} logged) "
                   f"to {report.path}")


def prune(name: Annotated[str | None, typer.Argument(help="Only this model's.")] = None,
          max_age_days: Annotated[float | None, typer.Option(
              help="Remove chunks whose last request is older than this.")] = None,
          max_mb: Annotated[float | None, typer.Option(
              help="Then the oldest chunks beyond this size per model.")] = None,
          as_json: JsonOpt = False) -> None:
    """Remove old request-log chunks, by age and size (a server also does this by
    itself: --log-max-age-days, --log-max-mb)."""
    from reprise.monitor import prune_requests

    report = prune_requests(name, max_age_days=max_age_days, max_mb=max_mb, workspace=_ws())
    if as_json:
        render.print_json(report.to_dict())
    else:
        typer.echo(f"removed {len(report.chunks)} chunks ({report.rows} rows, "
                   f"{render.human_bytes(report.bytes_freed)})")


def add_request_log_commands(app: typer.Typer) -> None:
    """Attach the request-log commands to ``app`` (the ``monitor`` group)."""
    app.command("requests")(requests)
    app.command("feedback")(feedback)
    app.command("export-labelled")(export_labelled)
    app.command("prune")(prune)

