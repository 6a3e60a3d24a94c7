"""``reprise models ...`` (register, optimize, list, show, promote, rollback, archive,
delete) and
``reprise audit ...`` (log, verify)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from reprise.cli import _render as render
from reprise.cli._fast import NA_HELP
from reprise.cli._fast import workspace as _ws

models_app = typer.Typer(help="Registered models: versions, aliases, promotion, rollback.",
                         no_args_is_help=True)
audit_app = typer.Typer(help="The hash-chained audit log: registry changes, rollout decisions.",
                        no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _version(value: str) -> int:
    from reprise.core.errors import UserError

    text = value.removeprefix("v")
    if not text.isdigit():
        raise UserError(f"VERSION must be a version number such as 3; got {value!r}")
    return int(text)


@models_app.command("register")
def register(
    name: Annotated[str, typer.Argument(help="Model name (letters, digits, . _ -).")],
    run: Annotated[str, typer.Option(help="The pipeline run whose step produced a package.")],
    step: Annotated[str | None, typer.Option(help="The step, when several made one.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Register the model package a run produced as the next version of NAME."""
    from reprise.registry import register_model

    rec, created = register_model(name, run, step=step, workspace=_ws())
    if as_json:
        render.print_json({"name": rec.name, "version": rec.version, "created": created,
                           "package": rec.package_hash, "run_id": rec.run_id})
        return
    gates = rec.metrics.get("gates_passed")
    state = {True: "gates passed", False: "GATES FAILED", None: "no gates"}[gates]
    verb = "registered" if created else "already registered as"
    typer.echo(f"{verb} {rec.ref} (run {rec.run_id}, {state})")


@models_app.command("optimize")
def optimize(
    ref: Annotated[str, typer.Argument(metavar="NAME:VERSION",
                                       help="The registered version to optimise.")],
    onnx: Annotated[bool, typer.Option("--onnx/--no-onnx", help="Convert to one ONNX graph "
                                       "(preprocessing + model); the only optimisation.")
                    ] = True,
    quantize: Annotated[str | None, typer.Option(
        help="dynamic-int8: quantise the graph's weights, gated on accuracy/F1.")] = None,
    atol: Annotated[float, typer.Option(
        help="Largest difference of a probability allowed by the parity check.")] = 1e-5,
    max_drop: Annotated[float, typer.Option(
        help="Largest accuracy/F1 drop (0.005 = 0.5 point) the quantisation gate allows: it "
        "passes when the drop's 95% upper bound is within it, fails when the lower bound "
        "is above, else is inconclusive (blocks promotion).")
    ] = 0.005,
    holdout: Annotated[str | None, typer.Option(
        metavar="FILE|NAME@N", help="Held-out rows (CSV, Parquet, JSON Lines or a dataset "
        "version) instead of those found in the version's lineage.")] = None,
    target: Annotated[str | None, typer.Option(
        metavar="COLUMN", help="The held-out rows' label column, for the quantisation gate "
        "(default: the model card's target).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Register an ONNX variant of NAME:VERSION as a new version, after proving that it
    predicts as the original (labels identical, probabilities within --atol) on its
    example rows, a held-out set (by default the one the training run's lineage holds:
    the table its evaluation consumed) and rows drawn from the signature."""
    from reprise.core.errors import UserError
    from reprise.registry._optimize import optimize_variant
    from reprise.registry._registry import split_ref

    name, alias, version = split_ref(ref)
    if version is None:
        raise UserError(f"give the version to optimise as NAME:VERSION, not {ref!r}")
    # the conversion is deterministic: optimising a version again finds its variant
    rec, created = optimize_variant(name, version, onnx=onnx, quantize=quantize, atol=atol,
                                    max_drop=max_drop, holdout=holdout,
                                    holdout_target=target, workspace=_ws())
    onnx_meta = rec.meta.get("onnx") or {}
    if as_json:
        render.print_json({"name": rec.name, "version": rec.version, "created": created,
                           "source_version": version,
                           "package": rec.package_hash, "parity": onnx_meta.get("parity"),
                           "quantize": onnx_meta.get("quantize"),
                           "parity_report": onnx_meta.get("report"),
                           "quantization_gate": onnx_meta.get("gate"),
                           "rewrites": onnx_meta.get("rewrites"),  # None: not recorded
                           "gates_passed": rec.metrics.get("gates_passed")})
        return
    gates = {True: "gates passed", False: "GATES FAILED", None: "no gates"}[
        rec.metrics.get("gates_passed")]
    if (onnx_meta.get("gate") or {}).get("verdict") == "inconclusive":
        gates = "quantisation gate INCONCLUSIVE (promotion blocked)"
    what = f"ONNX {quantize}" if quantize else "ONNX"
    report = onnx_meta.get("report") or {}
    verb = "registered" if created else "already registered as"
    typer.echo(f"{verb} {rec.ref}: {what} variant of {name}:{version}, {gates}")
    for line in parity_lines(report, onnx_meta.get("gate"), onnx_meta.get("rewrites")):
        typer.echo(line)


def parity_lines(report: dict[str, Any], gate: dict[str, Any] | None,
                 rewrites: list[str] | None = None) -> list[str]:
    """The parity report (and quantisation gate) of an ONNX variant, for people;
    ``rewrites``: what the conversion changed in the graph (None: not recorded, as for
    variants registered before it was)."""
    sources = report.get("sources") or {}
    held = report.get("holdout") or {}
    labels = report.get("labels_identical")
    out = [f"parity, native vs ONNX Runtime (atol {report.get('atol', 0):g}): "
           f"{'passed' if report.get('passed') else 'FAILED'}",
           f"  rows compared     {report.get('rows')}: {sources.get('example', 0)} example, "
           f"{sources.get('holdout', 0)} held-out, {sources.get('drawn_from_signature', 0)} "
           "drawn from the signature's ranges",
           f"  held-out rows     {_holdout_source(held)}",
           f"  max abs diff      {report.get('max_abs_diff') or 0.0:.2g}"
           + (" (probabilities)" if labels is not None else " (predictions)")]
    if labels is not None:
        ties = report.get("ties_within_atol", 0)
        out.append(f"  labels identical  {'yes' if labels else 'no'}"
                   + (f" (differing on {ties} native near-tie(s))" if ties else ""))
    if report.get("problem"):
        out.append(f"  problem           {report['problem']}")
    if rewrites is not None:
        out.append(f"  graph rewrites    {', '.join(rewrites) or 'none'}")
    if gate:
        out.extend(gate_lines(gate))
    return out


def gate_lines(gate: dict[str, Any]) -> list[str]:
    """The quantisation gate: each metric with its interval, the drop's, the verdict."""
    verdict = gate.get("verdict") or ("pass" if gate.get("passed") else "fail")
    conf = gate.get("confidence")
    level = f"{conf:.0%} " if conf is not None else ""
    out = [f"quantisation gate on {gate.get('rows')} rows, basis: {gate.get('basis')}"
           + (f" (labels: column {gate['target']!r})" if gate.get("target") else "")
           + f": {_VERDICT.get(verdict, verdict)}"]
    for r in gate.get("results", []):
        out.append(f"  {r['metric']:<9} native {r['native']:.4f}{_ci(r, 'native')}, int8 "
                   f"{r['quantized']:.4f}{_ci(r, 'quantized')}")
        v = r.get("verdict") or ("pass" if r["passed"] else "fail")
        out.append(f"  {'':<9} drop {r['drop']:.4f}{_ci(r, 'drop')} (max {r['max_drop']:g}): "
                   f"{_VERDICT.get(v, v)}")
        if r.get("reason") and v != "pass":
            out.append(f"  {'':<9} {r['reason']}")
    if gate.get("method"):
        methods = ", ".join(sorted({str(r.get("ci_method")) for r in gate.get("results", [])}))
        out.append(f"  {level}intervals: each model {methods}; the drop a paired bootstrap "
                   f"({gate.get('resamples')} resamples, seed {gate.get('seed')}, BCa)")
    return out


_VERDICT = {"pass": "passed", "fail": "FAILED", "inconclusive": "INCONCLUSIVE"}


def _ci(r: dict[str, Any], key: str) -> str:
    low, high = r.get(f"{key}_ci_low"), r.get(f"{key}_ci_high")
    return "" if low is None or high is None else f" [{low:.4f}, {high:.4f}]"


def _holdout_source(held: dict[str, Any]) -> str:
    source = held.get("source")
    if source in (None, "none"):
        where = " found in lineage" if held.get("searched") == "lineage" else ""
        return f"none{where}: {held.get('reason') or 'not recorded'}"
    rows = held.get("rows", 0)
    total = held.get("rows_total")
    count = f"{rows} rows" + (f" of {total}" if total not in (None, rows) else "")
    label = f", labels in column {held['target']!r}" if held.get("target") else ", no labels"
    if source == "lineage":
        return (f"{count} from lineage{label}:\n{'':20}output of step {held.get('step')} "
                f"(run {held.get('run')}), input `{held.get('as')}` of step "
                f"{held.get('consumed_by')}, artifact {str(held.get('artifact'))[:12]}")
    if source in ("file", "dataset"):
        return f"{count} from {source} {held.get('path')}{label}"
    return f"{count}, given{label}"


@models_app.command("list")
def list_(as_json: JsonOpt = False) -> None:
    """Models with their versions and aliases."""
    from reprise.cli._listing import models_list_command

    models_list_command(as_json=as_json)


@models_app.command("show")
def show(ref: Annotated[str, typer.Argument(help="NAME, NAME@ALIAS or NAME:VERSION.")],
         report: Annotated[Path | None, typer.Option(
             help="Write the version's evaluation report (offline HTML) here.")] = None,
         as_json: JsonOpt = False) -> None:
    """A model's versions, or one version: card, signature, lineage, alias history."""
    from reprise.registry import describe_model

    ws = _ws()
    info = describe_model(ref, workspace=ws)
    if report is not None:
        _write_report(ws, ref, report)
    if as_json:
        render.print_json(info)
        return
    if "versions" in info:
        from reprise.tracking._query import short_run_ids

        typer.echo(f"model {info['name']}; aliases: {info['aliases'] or 'none'}")
        short = short_run_ids(ws, [v["run_id"] for v in info["versions"] if v["run_id"]])
        render.table(["version", "status", "aliases", "gates", "task", "run", "created"],
                     [[v["version"], v["status"], ", ".join(v["aliases"]) or "-",
                       _gates(v["gates_passed"]), v["task"] or "-",
                       short.get(v["run_id"], "-"), render.ago(v["created"])]
                      for v in info["versions"]], keep=("version", "run"))
        return
    _show_version(info)


def _gates(passed: Any) -> str:
    return {True: "passed", False: "FAILED", None: "-"}[passed]


def _show_version(info: dict[str, Any]) -> None:
    lineage = (info.get("meta") or {}).get("lineage") or {}
    typer.echo(f"{info['name']}:{info['version']}  ({info['status']}; aliases: "
               f"{', '.join(info['aliases']) or 'none'}; gates: {_gates(info['gates_passed'])})")
    typer.echo(f"package {info['package']}  run {info['run_id']}  task {info['task']}")
    if lineage:
        typer.echo(f"data {', '.join(lineage.get('datasets') or []) or '-'}; files "
                   f"{', '.join(lineage.get('files') or []) or '-'}; code snapshot "
                   f"{(lineage.get('code_snapshot') or '-')[:16]}; pipeline "
                   f"{lineage.get('pipeline')}")
    meta = info.get("meta") or {}
    if meta.get("onnx"):  # an ONNX variant (models optimize): what it came from, its proof
        onnx_meta = meta["onnx"]
        what = f"ONNX {onnx_meta['quantize']}" if onnx_meta.get("quantize") else "ONNX"
        typer.echo(f"{what} variant of {info['name']}:{meta.get('source_version')} "
                   f"(package {str(meta.get('source_package') or '-')[:16]})")
        for line in parity_lines(onnx_meta.get("report") or {}, onnx_meta.get("gate"),
                                 onnx_meta.get("rewrites")):
            typer.echo(line)
    if info["metrics"]:
        render.table(["metric", "value"], [[k, v] for k, v in info["metrics"].items()])
    sig = info.get("signature") or {}
    render.table(["input", "type", "range / categories"],
                 [[f["name"], f["dtype"] + (str(f["shape"]) if f.get("shape") else ""),
                   f"{f['min']} .. {f['max']}" if "min" in f else
                   ", ".join(map(str, f.get("categories") or [])) or "-"]
                  for f in sig.get("inputs", [])])


def _write_report(ws: Any, ref: str, path: Path) -> None:
    from reprise.core.errors import UserError
    from reprise.evaluate import Evaluation
    from reprise.registry import load_model

    pkg = load_model(ref, workspace=ws)
    if pkg.evaluation is None:
        raise UserError(f"{ref} was packaged without an evaluation; there is no report")
    Evaluation.from_dict(pkg.evaluation).save_html(path)
    typer.echo(f"report written to {path}")


@models_app.command("promote")
def promote(
    name: Annotated[str, typer.Argument(help="Model name.")],
    version: Annotated[str, typer.Argument(help="Version number.")],
    alias: Annotated[str, typer.Option(help="Alias to move: production, staging, ...")],
    force: Annotated[bool, typer.Option(
        "--force", help="Promote although the evaluation gates did not pass.")] = False,
    reason: Annotated[str | None, typer.Option(
        help="Why (recorded in the audit log); required with --force.")] = None,
) -> None:
    """Point ALIAS at NAME:VERSION (its evaluation gates must have passed)."""
    from reprise.registry import promote as do

    v = _version(version)
    before = do(name, v, alias, force=force, reason=reason, workspace=_ws())
    if before == v:
        typer.echo(f"{name}@{alias} is already {v}; nothing changed")
        return
    was = f" (was {before})" if before is not None else ""
    typer.echo(f"{name}@{alias} -> {v}{was}")


@models_app.command("rollback")
def rollback(name: Annotated[str, typer.Argument(help="Model name.")],
             alias: Annotated[str, typer.Option(help="Alias to roll back.")],
             reason: Annotated[str | None, typer.Option(
                 help="Why (recorded in the audit log).")] = None) -> None:
    """Return ALIAS to the version it held before its latest promotion."""
    from reprise.registry import rollback as do

    old, new = do(name, alias, reason=reason, workspace=_ws())
    typer.echo(f"{name}@{alias} -> {new} (rolled back from {old})")


@models_app.command("archive")
def archive(name: Annotated[str, typer.Argument(help="Model name.")],
            version: Annotated[str, typer.Argument(help="Version number.")]) -> None:
    """Archive a version: kept for lineage, never promoted or resolved by name again."""
    from reprise.registry import archive_model

    archive_model(name, _version(version), workspace=_ws())
    typer.echo(f"archived {name}:{_version(version)}")


@models_app.command("delete")
def delete(name: Annotated[str, typer.Argument(help="Model name.")],
           version: Annotated[str, typer.Argument(help="Version number.")]) -> None:
    """Delete a version no alias holds (recorded in the audit log; `reprise gc` then frees
    its package if nothing else uses it)."""
    from reprise.registry import delete_model

    delete_model(name, _version(version), workspace=_ws())
    typer.echo(f"deleted {name}:{_version(version)}")


@audit_app.command("log")
def log(limit: Annotated[int, typer.Option(help="The newest N events (0: all).")] = 50,
        as_json: JsonOpt = False) -> None:
    """The audit log: who did what, when, to which model (rollout decisions with their
    reason and the checks that were not passing)."""
    from reprise.registry import audit_log

    events = audit_log(workspace=_ws())
    if limit:
        events = events[-limit:]
    if as_json:
        render.print_json(events)
        return
    if not events:
        typer.echo("The audit log is empty.")
        return
    render.table(["#", "time", "actor", "action", "subject", "details", "hash"],
                 [[e["seq"], render.timestamp(e["time"]), e["actor"], e["action"],
                   e["subject"], _details(e["action"], e["payload"]), e["hash"][:12]]
                  for e in events])


def _details(action: str, payload: dict[str, Any]) -> str:
    if action.startswith("rollout."):
        return _rollout_details(action, payload)
    keep = {k: v for k, v in payload.items() if v is not None and k != "package"}
    return ", ".join(f"{k}={v}" for k, v in keep.items())


def _rollout_details(action: str, p: dict[str, Any]) -> str:
    """One line for a rollout event: which rollout, the weight move, why, and the checks
    that did not pass (the full evidence is in ``--json``)."""
    head = f"rollout {p.get('rollout')}"
    if action == "rollout.start":
        steps = ",".join(str(w) for w in p.get("steps") or [])
        return (f"{head}: {p.get('stable')} -> {p.get('candidate')}, {p.get('strategy')}"
                f"{' ' + steps if steps else ''}, every {p.get('interval_s')} s"
                + (f", forced: {p.get('reason')}" if p.get("force") else ""))
    before, after = (p.get("from") or {}).get("weight"), p.get("weight")
    move = ""
    if isinstance(before, int | float) and isinstance(after, int | float):
        # a hold keeps the weight: say where it stays, not "25% -> 25%"
        move = f"weight {after:g}%" if before == after else f"weight {before:g}% -> {after:g}%"
    checks = (p.get("evidence") or {}).get("checks") or []
    off = [f"{c['name']}={c['verdict']}" for c in checks if c.get("verdict") != "pass"]
    reason = str(p.get("reason") or "")
    parts = [f"{head} #{p.get('decision')}", "" if move and move in reason else move, reason,
             f"checks not passing: {', '.join(off)}" if off else ""]
    return "; ".join(x for x in parts if x)


@audit_app.command("verify")
def verify(expect_head: Annotated[str | None, typer.Option(
        help="The head hash recorded earlier; catches events removed from the end.")] = None,
           as_json: JsonOpt = False) -> None:
    """Check every event's hash and the chain; exit 1 when the log was tampered with."""
    from reprise.registry import verify_audit

    report = verify_audit(expect_head=expect_head, workspace=_ws())
    if as_json:
        render.print_json(report.to_dict())
    elif report.ok:
        typer.echo(f"audit log intact: {report.events} event(s); head {report.head}")
    else:
        for p in report.problems:
            typer.echo(f"#{p.seq} {p.kind}: {p.message}", err=True)
        typer.echo(f"audit log TAMPERED: {len(report.problems)} problem(s) in "
                   f"{report.events} event(s)", err=True)
    if not report.ok:
        raise typer.Exit(1)


def predict(
    model: Annotated[str, typer.Argument(metavar="MODEL",
                                         help="NAME@ALIAS, NAME:VERSION or NAME.")],
    source: Annotated[str, typer.Argument(
        metavar="INPUT", help="CSV/TSV (optionally compressed), Parquet, JSON Lines, or a "
        "dataset version NAME@N.")],
    output: Annotated[Path, typer.Option("-o", "--output", help=".parquet or .csv file.")],
    chunk_rows: Annotated[int, typer.Option(help="Rows per chunk (bounds memory).")] = 50_000,
    na_values: Annotated[str | None, typer.Option(
        "--na-values", help=NA_HELP + " Default here: the spellings of the model's training "
        "data.")] = None,
    runtime: Annotated[str, typer.Option(
        help="native, onnx (the version's ONNX graph) or auto (ONNX when parity-proven).")
    ] = "native",
    as_json: JsonOpt = False,
) -> None:
    """Predict every row of INPUT with MODEL into OUTPUT, streaming in chunks."""
    from reprise.core._nulls import parse_na_values
    from reprise.registry._batch import predict_file

    ws = _ws()
    spellings = parse_na_values(na_values)
    if as_json:
        result = predict_file(model, source, output, chunk_rows=chunk_rows, workspace=ws,
                              na_values=spellings, runtime=runtime)
        render.print_json(result.to_dict())
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("predicting"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("rows"), transient=True) as bar:
        task = bar.add_task("predict", total=None)

        def advance(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        result = predict_file(model, source, output, chunk_rows=chunk_rows, workspace=ws,
                              progress=advance, na_values=spellings, runtime=runtime)
    flagged = f"; outside the training range: {result.out_of_range}" if result.out_of_range \
        else ""
    typer.echo(f"{result.rows:,} rows predicted by {result.model} in {result.seconds:.1f} s "
               f"-> {result.output} (run {result.run_id}){flagged}")
