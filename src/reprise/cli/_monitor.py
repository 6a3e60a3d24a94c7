"""``reprise monitor ...``: drift between dataset versions, as a table, JSON or HTML."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from reprise.cli import _render as render
from reprise.cli._fast import workspace as _ws
from reprise.cli._monitor_live import (
    ModelRefGroup,
    ReferenceOpt,
    WindowOpt,
    add_live_commands,
    check_logged,
    live,
    window_line,
)

if TYPE_CHECKING:
    from reprise.monitor._compare import ColumnDrift
    from reprise.monitor._datasets import DatasetDrift

monitor_app = typer.Typer(
    cls=ModelRefGroup, no_args_is_help=True,
    help="Monitoring: drift statistics, the request log, feedback. `reprise monitor "
         "NAME[@alias]` shows a served model's live windows (the `show` command).")
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
PolicyOpt = Annotated[Path | None, typer.Option(
    "--policy", help="YAML drift policy (alpha, correction, min_rows, ks_max_rows, k, "
    "columns: {NAME: {threshold: X, ignore: true}}).")]
CorrectionOpt = Annotated[str | None, typer.Option(
    "--correction", help="Multiple-testing correction across columns: holm (default: "
    "family-wise error) or bh (Benjamini-Hochberg: false discovery rate).")]
MinRowsOpt = Annotated[int | None, typer.Option(
    "--min-rows", help="Fewer values than this in a column: 'insufficient', no verdict "
    "(default 100).")]


def _policy(policy: Path | None, correction: str | None, min_rows: int | None) -> Any:
    from dataclasses import replace

    from reprise.monitor import DriftPolicy, load_drift_policy

    pol = load_drift_policy(policy) if policy is not None else DriftPolicy()
    changes: dict[str, Any] = {}
    if correction is not None:
        changes["correction"] = correction
    if min_rows is not None:
        changes["min_rows"] = min_rows
    return replace(pol, **changes) if changes else pol


def _run(reference: str, current: str, policy: Path | None, correction: str | None,
         min_rows: int | None) -> DatasetDrift:
    from reprise.monitor import compare_datasets

    return compare_datasets(reference, current, workspace=_ws(),
                            policy=_policy(policy, correction, min_rows))


@monitor_app.command("compare")
def compare(
    reference: Annotated[str, typer.Argument(metavar="NAME@A", help="Reference version.")],
    current: Annotated[str, typer.Argument(metavar="NAME@B", help="Version compared with it.")],
    policy: PolicyOpt = None,
    correction: CorrectionOpt = None,
    min_rows: MinRowsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Per-column drift of NAME@B against NAME@A, and the dataset verdict."""
    out = _run(reference, current, policy, correction, min_rows)
    if as_json:
        render.print_json(out.to_dict())
        return
    _print(out)


@monitor_app.command("report")
def report(
    reference: Annotated[str, typer.Argument(
        metavar="NAME@A|MODEL[@ALIAS]",
        help="Reference dataset version, or a served model (its newest live window).")],
    current: Annotated[str | None, typer.Argument(
        metavar="[NAME@B]", help="Dataset version compared with NAME@A.")] = None,
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="HTML file to write.")] = Path("drift.html"),
    policy: PolicyOpt = None,
    correction: CorrectionOpt = None,
    min_rows: MinRowsOpt = None,
    window: WindowOpt = None,
    live_reference: ReferenceOpt = None,
) -> None:
    """Write the offline HTML drift report (summaries only) of dataset version NAME@B
    against NAME@A, or of a served model's newest live window against its reference."""
    from reprise.core._atomic import atomic_write_bytes
    from reprise.monitor import render_drift_report

    if current is None:
        page, line = _live_page(reference, window, live_reference,
                                _policy(policy, correction, min_rows))
    else:
        out = _run(reference, current, policy, correction, min_rows)
        page = render_drift_report(out.report, out.reference, out.window,
                                   title=f"Drift of {out.window_ref} against "
                                         f"{out.reference_ref}")
        line = _verdict_line(out)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(output, page)
    typer.echo(f"{output} ({render.human_bytes(len(page))}): {line}")


def _live_page(ref: str, window: str | None, reference: str | None,
               policy: Any) -> tuple[bytes, str]:
    from reprise.core.errors import UserError
    from reprise.monitor import render_drift_report

    out = live(ref, window, 1, reference, None, policy)
    if not out.windows:
        check_logged(out, ref)
        raise UserError(f"{ref} has no logged traffic in that window to report on.")
    w = out.windows[-1]
    assert out.input_reference is not None and w.inputs is not None
    title = (f"Live drift of {out.model}:{out.version} against {out.reference['dataset']} "
             f"({w.window.rows} rows)")
    return render_drift_report(w.input, out.input_reference, w.inputs, title=title), \
        window_line(w)


def _verdict_line(out: DatasetDrift) -> str:
    r = out.report
    if r.verdict == "drift":
        return (f"drift in {len(r.drifted)} of {len(r.columns)} columns "
                f"({r.correction} at alpha {r.alpha:g}): {', '.join(r.drifted[:10])}"
                + (" ..." if len(r.drifted) > 10 else ""))
    if r.verdict == "no_drift":
        return f"no drift ({r.correction} at alpha {r.alpha:g}, {len(r.columns)} columns)"
    return "insufficient data: no verdict"


def _cell(c: ColumnDrift) -> list[Any]:
    effect = next(((k, v) for k in ("wasserstein", "tvd", "js")
                   if (v := c.effect.get(k)) is not None), None)
    verdict = c.verdict + ("" if c.verdict != "drift" or c.significant else " (uncorr.)")
    test = c.method or "-"
    if c.threshold is not None and c.statistic is not None:
        test += f" {'>' if c.statistic > c.threshold else '<='} {c.threshold:.3g}"
    missing = "-" if c.missing_rate is None else (
        f"{_pct(c.reference_missing_rate)}→{_pct(c.missing_rate)}")
    unseen = "-" if not c.unseen else _pct(c.unseen["share"])
    return [c.column, verdict, test, _g(c.statistic), _g(c.p_adjusted),
            "-" if effect is None else f"{_EFFECT[effect[0]]} {effect[1]:.3g}", missing,
            unseen]


_EFFECT = {"wasserstein": "W/σ", "tvd": "TVD", "js": "JS"}


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _print(out: DatasetDrift) -> None:
    r = out.report
    render.table(["column", "verdict", "test", "statistic", "p adj.", "effect", "missing",
                  "unseen"], [_cell(c) for c in r.columns],
                 title=f"{out.window_ref} against {out.reference_ref} "
                       f"({r.window_rows} vs {r.reference_rows} rows)",
                 keep=("column",))
    for c in r.columns:
        if c.reason:
            typer.echo(f"{c.column}: {c.reason}")
    if r.extra:
        typer.echo("not in the reference: " + ", ".join(r.extra))
    typer.echo(_verdict_line(out))


# the request log's commands (requests, feedback, export-labelled, prune) in the same group
from reprise.cli._monitor_log import add_request_log_commands  # noqa: E402

add_request_log_commands(monitor_app)
add_live_commands(monitor_app)

# the closed loop (issue 15.7): ``reprise monitor watch``
from reprise.cli._monitor_watch import add_watch_command  # noqa: E402

add_watch_command(monitor_app)
