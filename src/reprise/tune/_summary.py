"""What a study holds: its trials, its best trial, parameter importances, and an
offline HTML report (optimisation history, parallel coordinates, importances)."""

from __future__ import annotations

import html
import math
from typing import Any

from reprise.core.errors import NotFoundError

__all__ = ["describe_study", "list_studies", "load_study", "show_study", "study_html"]


def load_study(ws: Any, name: str) -> Any:
    """The Optuna study ``name`` of workspace ``ws``; a ``NotFoundError`` lists the others."""
    import optuna

    from reprise.tune._storage import open_storage, storage_url

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(storage_url(ws))
    try:
        return optuna.load_study(study_name=name, storage=storage,
                                 sampler=optuna.samplers.RandomSampler(0))
    except KeyError:
        names = sorted(s.study_name for s in optuna.get_all_study_summaries(storage))
        raise NotFoundError(f"no study {name!r} in this workspace; studies: "
                            f"{names or 'none yet'}. Run `reprise tune ...` to create one."
                            ) from None


def list_studies(ws: Any) -> list[dict[str, Any]]:
    """One row per study: name, direction, trial counts, best value."""
    import optuna

    from reprise.tune._storage import open_storage, storage_url

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for s in optuna.get_all_study_summaries(open_storage(storage_url(ws)),
                                            include_best_trial=True):
        best = s.best_trial
        rows.append({"study": s.study_name, "direction": s.direction.name.lower(),
                     "trials": s.n_trials,
                     "best_value": best.value if best is not None else None,
                     "best_params": best.params if best is not None else None,
                     "started": s.datetime_start.isoformat() if s.datetime_start else None})
    return sorted(rows, key=lambda r: r["study"])


def describe_study(study: Any, *, importances: bool = False) -> dict[str, Any]:
    """Trials, counts by state, the best trial, and (optionally) param importances."""
    from optuna.trial import TrialState

    trials = []
    counts = {"complete": 0, "pruned": 0, "failed": 0, "running": 0, "waiting": 0}
    names = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned",
             TrialState.FAIL: "failed", TrialState.RUNNING: "running",
             TrialState.WAITING: "waiting"}
    for t in study.get_trials(deepcopy=False):
        state = names[t.state]
        counts[state] += 1
        seconds = (t.datetime_complete - t.datetime_start).total_seconds() \
            if t.datetime_complete and t.datetime_start else None
        steps = sorted(t.intermediate_values)
        trials.append({"number": t.number, "state": state, "value": t.value,
                       "params": dict(t.params), "seconds": seconds,
                       "last_step": steps[-1] if steps else None,
                       "run_id": _run_of(t),
                       "retry_of": t.user_attrs.get("reprise_retry_of")})
    best = None
    if counts["complete"]:
        b = study.best_trial
        best = {"number": b.number, "value": b.value, "params": dict(b.params),
                "run_id": _run_of(b)}
    out: dict[str, Any] = {"study": study.study_name,
                           "direction": study.direction.name.lower(), "counts": counts,
                           "best": best, "trials": trials,
                           "settings": study.user_attrs.get("reprise")}
    if importances:
        out["importances"] = param_importances(study)
    return out


def _run_of(trial: Any) -> str | None:
    """The trial's Reprise run: the tuner records it with the trial's owner."""
    owner = trial.system_attrs.get("reprise_owner") or {}
    return owner.get("run") if isinstance(owner, dict) else None


def param_importances(study: Any) -> dict[str, float]:
    """fANOVA importances (Optuna's default evaluator); empty with too few trials."""
    import optuna
    from optuna.trial import TrialState

    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(done) < 2 or not any(len(t.params) for t in done):
        return {}
    try:
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
        return {k: float(v) for k, v in
                optuna.importance.get_param_importances(study, evaluator=evaluator).items()}
    except (RuntimeError, ValueError):  # e.g. every trial took the same params
        return {}


def show_study(ws: Any, name: str) -> dict[str, Any]:
    """:func:`describe_study` of study ``name``, importances included."""
    return describe_study(load_study(ws, name), importances=True)


def study_html(study: Any, info: dict[str, Any] | None = None) -> str:
    """A self-contained page (plotly's JavaScript embedded, no network needed)."""
    import optuna.visualization as vis

    info = info or describe_study(study, importances=True)
    if "importances" not in info:
        info = {**info, "importances": param_importances(study)}
    figures = []
    if info["counts"]["complete"]:
        figures.append(("Optimisation history", vis.plot_optimization_history(study)))
        if any(t["params"] for t in info["trials"]):
            figures.append(("Parallel coordinates", vis.plot_parallel_coordinate(study)))
        if info["importances"]:
            figures.append(("Parameter importances", _importance_figure(info["importances"])))
    if any(t["last_step"] is not None for t in info["trials"]):
        figures.append(("Intermediate values", vis.plot_intermediate_values(study)))
    parts = [f"<h2>{html.escape(title)}</h2>" + fig.to_html(
        full_html=False, include_plotlyjs=(i == 0), div_id=f"fig{i}")
        for i, (title, fig) in enumerate(figures)]
    name = html.escape(info["study"])
    best = info["best"]
    best_line = (f"best trial {best['number']}: value {_num(best['value'])}, params "
                 f"{html.escape(str(best['params']))}") if best else "no complete trial yet"
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Study "
            f"{name}</title></head><body style='font-family:sans-serif'>"
            f"<h1>Study {name}</h1><p>{html.escape(info['direction'])}; "
            f"{html.escape(str(info['counts']))}</p><p>{best_line}</p>"
            + _trials_table(info["trials"]) + "".join(parts) + "</body></html>")


def _importance_figure(importances: dict[str, float]) -> Any:
    """A bar chart of importances already computed (Optuna's plot would compute them again)."""
    import plotly.graph_objects as go

    names = sorted(importances, key=lambda k: importances[k])
    return go.Figure(go.Bar(x=[importances[k] for k in names], y=names, orientation="h"),
                     layout={"xaxis_title": "importance (fANOVA)", "height": 120 + 30 * len(names)})


def _trials_table(trials: list[dict[str, Any]]) -> str:
    keys = sorted({k for t in trials for k in t["params"]})
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ["trial", "state", "value", *keys])
    rows = []
    for t in trials:
        cells = [str(t["number"]), t["state"], _num(t["value"])]
        cells += [str(t["params"].get(k, "")) for k in keys]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f"<table border='1' cellpadding='3'><tr>{head}</tr>{''.join(rows)}</table>"


def _num(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.6g}" if isinstance(v, float) and math.isfinite(v) else str(v)
