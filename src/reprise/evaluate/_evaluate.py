"""``evaluate``: score a model (or its predictions), check gates, log and report.

The order matters and is the contract: every option and gate is checked, and
the baseline resolved, before any prediction or metric is computed; metrics
are logged (with ``gates.passed``) before a failing gate raises, so the run
shows why it failed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from reprise.core.errors import GateFailedError, UserError
from reprise.evaluate._baseline import baseline_metrics, baseline_value
from reprise.evaluate._bootstrap import DEFAULT_RESAMPLES
from reprise.evaluate._confidence import confidence_intervals
from reprise.evaluate._curves import curves
from reprise.evaluate._evaluation import FORMAT_VERSION, Evaluation
from reprise.evaluate._gates import Gate, check_gates, failure_message, parse_gates
from reprise.evaluate._inputs import Prepared, prepare
from reprise.evaluate._intervals import effective_count
from reprise.evaluate._metrics import (
    check_applicable,
    confusion,
    default_metrics,
    per_class,
    point_metrics,
)
from reprise.evaluate._predict import predict
from reprise.evaluate._slices import (
    column_values,
    fairness,
    slice_metrics,
    slice_table,
    worst_slices,
)

__all__ = ["evaluate"]

REPORT_NAME = "evaluation.html"


def evaluate(model: Any = None, X: Any = None, y: Any = None, *, y_pred: Any = None,
             y_proba: Any = None, sample_weight: Any = None, task: str = "auto",
             labels: Sequence[Any] | None = None,
             positive_label: Any = None, metrics: Sequence[str] | None = None,
             slices: Sequence[str] | str | None = None, sensitive: str | None = None,
             bins: int = 4, min_slice_size: int = 30, gates: Mapping[str, str] | None = None,
             baseline: str | None = None, bootstrap: int | bool = DEFAULT_RESAMPLES,
             confidence: float = 0.95, seed: int = 0, report: bool = True, log: bool = True,
             history_run: str | None = None, name: str | None = None,
             workspace: Any = None) -> Evaluation:
    """Evaluate a fitted model on ``X``, ``y`` (or given ``y_pred``/``y_proba``).

    Args:
        model: anything with ``predict`` (and ``predict_proba``), a scikit-learn Pipeline,
            or a ``torch.nn.Module``; None to evaluate ``y_pred``/``y_proba``.
        X: the features; also where ``slices`` and ``sensitive`` columns are read
            (a DataFrame or a dict of columns).
        y: the true targets.
        y_pred, y_proba: precomputed predictions and/or probabilities ((n,) for the
            positive class of a binary task, or (n, classes)).
        sample_weight: one weight >= 0 per row, as scikit-learn's ``sample_weight``: every
            metric, slice and resample is weighted; intervals count unequal weights as
            fewer rows (Kish's effective sample size).
        task: "auto", "classification", "binary", "multiclass" or "regression".
        labels: class order of ``y_proba``'s columns (a model's ``classes_`` by default).
        positive_label: the positive class of a binary task (default: the greater label).
        metrics: which metrics (default: every one that applies).
        slices: columns to compute metrics per segment of (numeric ones in ``bins``
            quantile bins); segments under ``min_slice_size`` rows are flagged.
        sensitive: a column for fairness gaps (binary classification).
        gates: ``{metric: rule}``, e.g. ``{"f1": ">= 0.9"}``; a failure raises
            :class:`~reprise.core.errors.GateFailedError` after logging.
        baseline: ``"run:<RUN_ID>"`` for gates ``"no worse than baseline [by X]"``.
        bootstrap: resamples for the bootstrapped confidence intervals and the
            correlations of macro averages (0 or False: no intervals at all). Each
            metric's interval uses the method with the best known coverage for it
            (``ci_method``: Clopper–Pearson, MOVER, DeLong/Newcombe, BCa; see the README).
        confidence, seed: interval level and the resampling seed.
        report: store the HTML report as ``evaluation.html`` in the active run/step.
        log: log the headline metrics to the active run or step.
        history_run: a run whose training metrics (``train/...``, ``val/...``, losses)
            the report plots; default: the active run, outside pipeline steps.
        name: tells several evaluations in one run or step apart (``"val"``, ``"test"``):
            metrics are logged as ``<name>/<key>`` and the report as
            ``evaluation-<name>.html``.
        workspace: where baselines and histories are looked up (default: the current one).

    Example:
        >>> from reprise.evaluate import evaluate
        >>> ev = evaluate(y=[0, 1, 1, 0], y_proba=[0.1, 0.8, 0.4, 0.3], bootstrap=200)
        >>> ev.value("accuracy"), ev["metrics"]["roc_auc"]["value"]
        (0.75, 1.0)
    """
    parsed = parse_gates(gates)
    report_name = _report_name(name)
    resamples = _resamples(bootstrap)
    columns = _columns(slices)
    _check_numbers(bins, min_slice_size, confidence)
    base = _baseline_values(parsed, baseline, workspace)  # an unknown run fails before work
    p = _prepared(model, X, y, y_pred, y_proba, task, labels, positive_label, sample_weight)
    names = list(metrics) if metrics is not None else default_metrics(p)
    check_applicable(names, p)
    for column in [*columns, *([sensitive] if sensitive else [])]:
        column_values(X, column, p.n)
    if sensitive and p.positive is None:
        raise UserError(f"fairness (sensitive={sensitive!r}) is defined for binary "
                        f"classification; this is a {p.task} evaluation.")
    _check_gates_apply(parsed, p, names, columns, sensitive, resamples)
    ev = _compute(p, names, X, columns, sensitive, bins=bins, min_size=min_slice_size,
                  resamples=resamples, confidence=confidence, seed=seed)
    if parsed:
        results = check_gates(parsed, ev.gate_values(), base)
        ev["gates"] = {"passed": all(r["passed"] for r in results), "results": results}
        ev["baseline"] = baseline
    _log(ev, log=log, report=report_name if report else None, prefix=name,
         history_run=history_run, workspace=workspace)
    if ev.passed is False:
        raise GateFailedError(failure_message(ev["gates"]["results"]), ev["gates"]["results"],
                              ev)
    return ev


def _report_name(name: str | None) -> str:
    if name is None:
        return REPORT_NAME
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise UserError(f"name must be 1-64 letters, digits, '_', '-' or '.' (e.g. 'test'); "
                        f"got {name!r}.")
    return f"evaluation-{name}.html"


def _resamples(bootstrap: int | bool) -> int:
    if bootstrap is True:
        return DEFAULT_RESAMPLES
    if bootstrap is False or bootstrap is None:
        return 0
    if not isinstance(bootstrap, int) or bootstrap < 0:
        raise UserError(f"bootstrap must be a number of resamples (>= 0) or True/False; got "
                        f"{bootstrap!r}.")
    return bootstrap


def _columns(slices: Sequence[str] | str | None) -> list[str]:
    if slices is None:
        return []
    columns = [slices] if isinstance(slices, str) else list(slices)
    if not all(isinstance(c, str) for c in columns):
        raise UserError(f"slices must be column names (strings); got {columns!r}.")
    return columns


def _check_numbers(bins: int, min_slice_size: int, confidence: float) -> None:
    if not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
        raise UserError(f"confidence must be between 0 and 1 (e.g. 0.95), got {confidence!r}.")
    if not isinstance(bins, int) or bins < 1:
        raise UserError(f"bins must be an integer >= 1, got {bins!r}.")
    if not isinstance(min_slice_size, int) or min_slice_size < 0:
        raise UserError(f"min_slice_size must be an integer >= 0, got {min_slice_size!r}.")


def _prepared(model: Any, X: Any, y: Any, y_pred: Any, y_proba: Any, task: str,
              labels: Sequence[Any] | None, positive_label: Any,
              sample_weight: Any) -> Prepared:
    if model is None:
        return prepare(y, y_pred, y_proba, task=task, labels=labels,
                       positive_label=positive_label, sample_weight=sample_weight)
    if y_pred is not None or y_proba is not None:
        raise UserError("give either a model (with X) or y_pred=/y_proba=, not both.")
    if y is None:
        raise UserError("y (the true targets) is required to evaluate the model.")
    out = predict(model, X, task)
    return prepare(y, out.y_pred, out.y_proba, task=task if task != "auto" else out.task,
                   labels=labels if labels is not None else out.labels,
                   positive_label=positive_label, sample_weight=sample_weight)


def _check_gates_apply(gates: Sequence[Gate], p: Prepared, names: Sequence[str],
                       columns: Sequence[str], sensitive: str | None, resamples: int) -> None:
    for gate in gates:
        m = gate.metric
        if m.startswith("worst_slice."):
            if not columns:
                raise UserError(f"gate {m!r} needs slices=[...] (the columns to slice by).")
            if m.removeprefix("worst_slice.") not in slice_metrics(p):
                raise UserError(f"gate {m!r}: slices of a {p.task} evaluation are scored with "
                                f"{', '.join(slice_metrics(p))}.")
        elif m.startswith("fairness."):
            if not sensitive:
                raise UserError(f"gate {m!r} needs sensitive='<column>'.")
            if m.endswith((".ci_low", ".ci_high")) and not resamples:
                raise UserError(f"gate {m!r} needs intervals; drop bootstrap=0.")
        else:
            base, _, bound = m.partition(".")
            if base not in names:
                raise UserError(f"gate {m!r}: metric {base!r} is not computed here; this "
                                f"evaluation computes {', '.join(names)}.")
            if bound and not resamples:
                raise UserError(f"gate {m!r} needs bootstrap intervals; drop bootstrap=0.")


def _baseline_values(gates: Sequence[Gate], baseline: str | None,
                     workspace: Any) -> dict[str, float] | None:
    wanted = [g.metric for g in gates if g.op == "baseline"]
    if not wanted:
        return None
    if baseline is None:
        raise UserError(f"gate(s) {', '.join(wanted)} compare with a baseline; pass "
                        "baseline='run:<RUN_ID>'.")
    found = baseline_metrics(baseline, workspace)
    return {name: baseline_value(found, name, baseline) for name in wanted}


def _compute(p: Prepared, names: list[str], X: Any, columns: Sequence[str],
             sensitive: str | None, *, bins: int, min_size: int, resamples: int,
             confidence: float, seed: int) -> Evaluation:
    values = point_metrics(p, names)
    intervals = (confidence_intervals(p, names, resamples=resamples, confidence=confidence,
                                      seed=seed) if resamples else {})
    metrics = {name: {"value": values[name], **intervals.get(name, {})} for name in names}
    rows = slice_table(p, X, columns, bins=bins, min_size=min_size) if columns else []
    classification = p.is_classification
    return Evaluation({
        "version": FORMAT_VERSION, "task": p.task, "n": p.n, "labels": list(p.labels),
        "positive_label": None if p.positive is None else p.labels[p.positive],
        "metrics": metrics,
        "sample_weight": None if p.weight is None else {
            "total": float(p.weight.sum()), "effective_rows": float(effective_count(p.weight))},
        # how intervals were made; each metric's own method is its "ci_method"
        "bootstrap": {"resamples": resamples, "confidence": confidence,
                      "seed": seed} if resamples else None,
        "per_class": per_class(p) if classification else None,
        "confusion_matrix": confusion(p) if classification else None,
        "curves": curves(p),
        "slices": rows, "worst_slice": worst_slices(rows),
        "slice_options": {"columns": list(columns), "bins": bins, "min_size": min_size},
        "fairness": fairness(p, X, sensitive, bins=bins, min_size=min_size,
                             confidence=confidence if resamples else None) if sensitive
        else None,
        "gates": None, "baseline": None,
    })


def _log(ev: Evaluation, *, log: bool, report: str | None, prefix: str | None,
         history_run: str | None, workspace: Any) -> None:
    """Metrics and the report to the active run or pipeline step, if there is one."""
    from reprise.tracking._api import active_run
    from reprise.tracking._run import Run

    run = active_run()
    if run is None:
        return
    if report:
        if history_run is None and isinstance(run, Run):
            history_run, workspace = run.id, workspace or run.workspace
        history = _history(history_run, workspace) if history_run else None
        run.log_artifact(ev.to_html(history=history), report)
    if log:
        run.log_metrics({f"{prefix}/{k}" if prefix else k: v for k, v in ev.headline().items()})


def _history(run_id: str, workspace: Any) -> dict[str, Any]:
    """Training curves of a run: keys under train/ or val/ (or ending in loss), >= 2 points."""
    from reprise.evaluate._curves import downsample
    from reprise.tracking._api import resolve_workspace

    workspace = resolve_workspace(workspace)
    store = workspace.metadata
    workspace.recover()  # catch up a live run's journal, so its points so far are visible
    series: dict[str, tuple[list[int], list[float]]] = {}
    for point in store.get_metrics(store.get_run(run_id).id):
        if _is_training_curve(point.key):
            steps, values = series.setdefault(point.key, ([], []))
            steps.append(point.step)
            values.append(point.value)
    import numpy as np

    out: dict[str, Any] = {}
    for key in sorted(series):
        steps, values = series[key]
        if len(steps) >= 2:
            s, v = downsample(np.asarray(steps, dtype=float), np.asarray(values, dtype=float))
            out[key] = {"step": s, "value": v}
    return out


def _is_training_curve(key: str) -> bool:
    parts = key.lower().split("/")
    if parts[0] == "system":
        return False
    return bool({"train", "val", "valid", "validation"} & set(parts[:-1])) \
        or parts[-1] in ("loss", "train_loss", "val_loss")
