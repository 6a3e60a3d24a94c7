"""Hot commands (``reprise run``, ``reprise data add``, ``reprise serve``, and the read-only
listings of ``_listing``), shared by the Typer commands and the fast path in ``reprise.cli.main``.

The fast path exists because ``reprise run`` on an unchanged pipeline is the
command users repeat most, and Typer (with click and pydantic behind it) costs
more start-up time than the whole cached run; ``data add`` is compared with
``dvc add`` on start-up-bound sizes too; ``serve`` starts every new replica of a
model server (its cold start is benchmarked). ``main`` parses these with argparse
(standard library) and calls the same functions the Typer commands call;
a command's ``--help`` still goes through Typer so there is one help text (the
top-level ``reprise --help`` is a copy of Typer's, checked by a test: ``_help``).
A test checks that both parsers accept the same options with the same defaults.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from reprise.cli import _listing

__all__ = ["DELIMITER_HELP", "NA_HELP", "PROGRESS_MODES", "Parser", "data_add_command", "dispatch",
           "parsers", "run_command", "serve_command", "workspace"]

PROGRESS_MODES = ("auto", "live", "lines", "none")
NA_HELP = ("Text meaning a missing value in CSV/TSV/JSON Lines, in every column, separated by "
           "commas ('NA,,-'; 'default,?' adds to the defaults; 'none'). Default: pandas' "
           "spellings (NA, null, N/A, NaN, empty...).")
DELIMITER_HELP = ("Field delimiter of a CSV file: one character, '\\t' for a tab. Default: a tab "
                  "for .tsv, else a comma unless the file's first lines split evenly only on "
                  "';', a tab or '|'.")


def workspace() -> Any:
    """The workspace the command runs in (found upwards from the current directory)."""
    from reprise.tracking import open_workspace

    return open_workspace()


def run_command(target: str, *, params: list[str], seed: int, workers: int | None,
                no_cache: bool, force: list[str], steps: list[str], progress: str,
                as_json: bool, executor: str | None = None, ray_address: str | None = None,
                ) -> int:
    """Run a pipeline from the command line; return the exit code (1 if a step failed)."""
    from reprise.cli._render import parse_pairs, print_json
    from reprise.core.errors import UserError
    from reprise.pipeline._load import load_pipeline
    from reprise.pipeline._progress import make_progress
    from reprise.pipeline._runner import StepFailedError, run_pipeline

    if progress not in PROGRESS_MODES:
        raise UserError(f"--progress must be auto, live, lines or none, not {progress!r}.")
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be 1 or more, not {workers}.")
    ws = workspace()
    pipe = load_pipeline(target)
    values = parse_pairs(params, "-p")
    try:
        result = run_pipeline(pipe, values, seed=seed, workers=workers, cache=not no_cache,
                              force=force, workspace=ws, steps=steps or None,
                              progress=make_progress("none" if as_json else progress),
                              executor=executor, executor_address=ray_address)
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


def data_add_command(name: str, path: str, *, schema: str | None, quarantine: bool,
                     fmt: str | None, encoding: str, allow_type_change: bool,
                     as_json: bool, link: bool = False, na_values: str | None = None,
                     delimiter: str | None = None) -> int:
    """Register a dataset version from the command line; return the exit code."""
    from reprise.cli._render import human_bytes, print_json
    from reprise.core._nulls import parse_na_values
    from reprise.data._dataset import add_dataset

    res = add_dataset(name, path, workspace=workspace(), schema=schema,
                      quarantine=quarantine, fmt=fmt, encoding=encoding,
                      allow_type_change=allow_type_change, link=link,
                      na_values=parse_na_values(na_values), delimiter=delimiter)
    rec = res.record
    if as_json:
        print_json({"dataset": rec.ref, "created": res.created, "hash": rec.artifact_hash,
                    "rows": rec.rows, "format": rec.format, "quarantine": res.quarantine,
                    "delimiter": rec.meta.get("delimiter"),
                    "validation": None if res.report is None else res.report.to_dict()})
        return 0
    rows = "" if rec.rows is None else f", {rec.rows} rows"
    sep = rec.meta.get("delimiter")
    if sep is not None and sep != ("\t" if ".tsv" in path.lower() else ","):
        rows += ", delimiter " + ("tab" if sep == "\t" else repr(sep))  # sniffed or given
    if res.created:
        print(f"added {rec.ref} ({rec.format}{rows}, {human_bytes(rec.meta['size'])})")
    else:
        print(f"unchanged: {rec.ref} already holds these bytes")
    if res.quarantine:
        print(f"quarantined {res.quarantine['rows']} failing rows as artifact "
              f"{res.quarantine['hash'][:12]}:", file=sys.stderr)
        print(res.report.render(), file=sys.stderr)
    return 0


def serve_command(refs: list[str], *, host: str, port: int, max_batch_size: int,
                  max_wait_ms: float, latency_budget_ms: float, poll_interval: float,
                  max_body_bytes: int, extra_columns: str | None, out_of_range: str | None,
                  max_header_bytes: int, header_timeout: float, body_timeout: float,
                  max_connections: int, allowed_host: list[str], allowed_origin: list[str],
                  access_log: bool, log_level: str, key_header: str | None = "x-request-key",
                  key_column: str | None = None, shadow_queue: int = 100,
                  no_request_log: bool = False, log_sample: float = 0.1, log_cap: int = 100,
                  log_exclude: list[str] | None = None, log_buffer: int = 50_000,
                  log_flush_s: float = 10.0,
                  log_max_age_days: float = 30.0, log_max_mb: float = 1024.0,
                  slo_availability: float = 0.999, slo_latency_ms: float | None = None,
                  slo_latency_target: float = 0.99, otel: bool = False,
                  monitor: str | None = None, monitor_interval: float = 60.0,
                  cache_mb: float = 0.0, cache_admit: str = "second",
                  cache_min_hit_rate: float = 0.01,
                  warmup_idle: float = 300.0,
                  runtime: str = "native") -> int:
    """Serve registered models until stopped; return the exit code."""
    from reprise.core import require
    from reprise.core.errors import UserError

    require("uvicorn", "serve", "reprise serve")
    if otel:  # before anything loads: a missing extra is the user's to fix (exit 2)
        require("opentelemetry.sdk.trace", "otel", "reprise serve --otel")
    from reprise.registry import RegistrySource
    from reprise.serve import Settings, run_server

    if port < 0 or port > 65535:
        raise UserError(f"--port must be between 0 and 65535, not {port}.")
    settings = Settings(max_batch_size=max_batch_size, max_wait_ms=max_wait_ms,
                        latency_budget_ms=latency_budget_ms, poll_interval=poll_interval,
                        max_body_bytes=max_body_bytes, extra_columns=extra_columns,
                        out_of_range=out_of_range, max_header_bytes=max_header_bytes,
                        header_timeout=header_timeout, body_timeout=body_timeout,
                        max_connections=max_connections, allowed_hosts=tuple(allowed_host),
                        allowed_origins=tuple(allowed_origin), key_header=key_header or None,
                        key_column=key_column, shadow_queue=shadow_queue,
                        request_log=not no_request_log, log_sample=log_sample,
                        log_cap=log_cap, log_exclude=tuple(log_exclude or ()),
                        log_buffer=log_buffer, log_flush_rows=min(10_000, log_buffer),
                        log_flush_s=log_flush_s, log_max_age_days=log_max_age_days or None,
                        log_max_mb=log_max_mb or None,
                        slo_availability=slo_availability, slo_latency_ms=slo_latency_ms,
                        slo_latency_target=slo_latency_target, otel=otel,
                        cache_mb=cache_mb, cache_admit=cache_admit,
                        cache_min_hit_rate=cache_min_hit_rate,
                        warmup_idle=warmup_idle)
    from reprise.cli._drift_check import install_input_drift_check

    stop, watchers = None, list[Any]()
    if monitor is not None:  # the closed loop in this process (a lease: one decides)
        from pathlib import Path

        from reprise.cli._loop_wiring import start_watchers

        if not monitor_interval > 0:
            raise UserError(f"--monitor-interval must be more than 0, not {monitor_interval}.")
        stop, watchers = start_watchers(refs, Path(monitor), interval_s=monitor_interval)
    try:
        source = RegistrySource(workspace(), runtime=runtime)
        install_input_drift_check(source.workspace)  # loads nothing until a policy asks
        run_server(source, refs, settings=settings, host=host, port=port,
                   log_level=log_level, access_log=access_log)
    finally:
        if stop is not None:
            stop.set()
            for t in watchers:  # each gives its lease up on the way out
                t.join(10)
    return 0


class Parser(argparse.ArgumentParser):
    """argparse with click's usage-error shape and exit code."""

    def error(self, message: str) -> Any:  # same shape as click's usage errors, exit 2
        sys.stderr.write(f"Usage: {self.prog} [OPTIONS] {self.usage}\n"
                         f"Try '{self.prog} --help' for help.\n\nError: {message}\n")
        sys.exit(2)


def _run_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="reprise run", usage="TARGET", add_help=False, allow_abbrev=False)
    ap.add_argument("target")
    ap.add_argument("-p", "--param", action="append", default=[])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--force", action="append", default=[])
    ap.add_argument("--step", action="append", default=[])
    ap.add_argument("--progress", default="auto")
    ap.add_argument("--json", action="store_true", dest="as_json")
    ap.add_argument("--executor", default=None)
    ap.add_argument("--ray-address", default=None)
    return ap


def _data_add_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="reprise data add", usage="NAME PATH", add_help=False, allow_abbrev=False)
    ap.add_argument("name")
    ap.add_argument("path")
    ap.add_argument("--schema", default=None)
    ap.add_argument("--quarantine", action="store_true")
    ap.add_argument("--format", dest="fmt", default=None)
    ap.add_argument("--encoding", default="utf-8")
    ap.add_argument("--allow-type-change", action="store_true")
    ap.add_argument("--link", action="store_true")
    ap.add_argument("--na-values", default=None)
    ap.add_argument("--delimiter", default=None)
    ap.add_argument("--json", action="store_true", dest="as_json")
    return ap


def _serve_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="reprise serve", usage="NAME[@ALIAS|:VERSION]...", add_help=False,
                 allow_abbrev=False)
    ap.add_argument("refs", nargs="+")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--max-batch-size", type=int, default=64)
    ap.add_argument("--max-wait-ms", type=float, default=2.0)
    ap.add_argument("--latency-budget-ms", type=float, default=1000.0)
    ap.add_argument("--poll-interval", type=float, default=5.0)
    ap.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--extra-columns", default=None)
    ap.add_argument("--out-of-range", default=None)
    ap.add_argument("--max-header-bytes", type=int, default=64 * 1024)
    ap.add_argument("--header-timeout", type=float, default=10.0)
    ap.add_argument("--body-timeout", type=float, default=60.0)
    ap.add_argument("--max-connections", type=int, default=1000)
    ap.add_argument("--allowed-host", action="append", default=[])
    ap.add_argument("--allowed-origin", action="append", default=[])
    ap.add_argument("--access-log", action="store_true")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--key-header", default="x-request-key")
    ap.add_argument("--key-column", default=None)
    ap.add_argument("--shadow-queue", type=int, default=100)
    ap.add_argument("--no-request-log", action="store_true")
    ap.add_argument("--log-sample", type=float, default=0.1)
    ap.add_argument("--log-cap", type=int, default=100)
    ap.add_argument("--log-exclude", action="append", default=[])
    ap.add_argument("--log-buffer", type=int, default=50_000)
    ap.add_argument("--log-flush-s", type=float, default=10.0)
    ap.add_argument("--log-max-age-days", type=float, default=30.0)
    ap.add_argument("--log-max-mb", type=float, default=1024.0)
    ap.add_argument("--slo-availability", type=float, default=0.999)
    ap.add_argument("--slo-latency-ms", type=float, default=None)
    ap.add_argument("--slo-latency-target", type=float, default=0.99)
    ap.add_argument("--otel", action="store_true")
    ap.add_argument("--monitor", default=None)
    ap.add_argument("--monitor-interval", type=float, default=60.0)
    ap.add_argument("--cache-mb", type=float, default=0.0)
    ap.add_argument("--cache-admit", default="second")
    ap.add_argument("--cache-min-hit-rate", type=float, default=0.01)
    ap.add_argument("--warmup-idle", type=float, default=300.0)
    ap.add_argument("--runtime", default="native")
    return ap


def _parsed(make_parser: Callable[[], argparse.ArgumentParser], command: Callable[..., int]
            ) -> tuple[Callable[[], argparse.ArgumentParser], Callable[[list[str]], int]]:
    """A parsers entry whose handler parses with ``make_parser`` and calls ``command``."""
    return make_parser, partial(_listing.run_parsed, make_parser, command)


def _fast_run(argv: list[str]) -> int:
    ns = _run_parser().parse_args(argv)
    return run_command(ns.target, params=ns.param, seed=ns.seed, workers=ns.workers,
                       no_cache=ns.no_cache, force=ns.force, steps=ns.step,
                       progress=ns.progress, as_json=ns.as_json, executor=ns.executor,
                       ray_address=ns.ray_address)


def _fast_data_add(argv: list[str]) -> int:
    return data_add_command(**vars(_data_add_parser().parse_args(
        _glued(_glued(argv, "--na-values"), "--delimiter"))))


def _glued(argv: list[str], option: str) -> list[str]:
    """``OPTION VALUE`` as ``OPTION=VALUE``: argparse takes a value that starts with '-'
    (``--na-values -``, a common spelling) for an option; click does not."""
    out: list[str] = []
    it = iter(argv)
    for arg in it:
        value = next(it, None) if arg == option else None
        out.append(arg if value is None else f"{option}={value}")
    return out


# command words -> (parser factory, handler of the remaining arguments)
parsers: dict[tuple[str, ...], tuple[Callable[[], argparse.ArgumentParser],
                                     Callable[[list[str]], int]]] = {
    ("run",): (_run_parser, _fast_run),
    ("data", "add"): (_data_add_parser, _fast_data_add),
    ("serve",): _parsed(_serve_parser, serve_command),
    ("runs", "list"): _parsed(_listing.runs_list_parser, _listing.runs_list_command),
    ("runs", "show"): _parsed(_listing.runs_show_parser, _listing.runs_show_command),
    ("data", "list"): _parsed(_listing.data_list_parser, _listing.data_list_command),
    ("models", "list"): _parsed(_listing.models_list_parser, _listing.models_list_command),
}


def dispatch(args: list[str]) -> int | None:
    """Run ``args`` on the fast path and return the exit code, or None if it is not a hot
    command (or asks for help): Typer takes it then."""
    if {"--help", "-h"} & set(args):
        return None
    for words, (_, handler) in parsers.items():
        if tuple(args[: len(words)]) == words:
            return handler(args[len(words):])
    return None
