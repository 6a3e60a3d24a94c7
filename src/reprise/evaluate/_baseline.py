"""Baselines for gates like ``"f1": "no worse than baseline by 0.01"``.

A baseline is named by a reference string; :func:`baseline_metrics` turns it
into the final values of its metrics. Accepted forms today:

* ``run:<RUN_ID>``: a run id or an unambiguous prefix;
* ``run:<RUN_ID>/<STEP>``: only the metrics one step logged in a pipeline run.

A pipeline run records a step's metrics as ``<step>/<key>``, so a gate on
``f1`` matches ``f1`` itself or, when the run has no such key, the one key
ending in ``/f1``. Two steps with an ``f1`` are ambiguous: name the step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reprise.core.errors import UserError

__all__ = ["BASELINE_FORMS", "baseline_metrics", "baseline_value"]

BASELINE_FORMS = ("run:<RUN_ID>", "run:<RUN_ID>/<STEP>")


def baseline_metrics(ref: str, workspace: Any = None) -> dict[str, float]:
    """The final value of every metric of baseline ``ref`` (see the module docstring).

    Example:
        >>> import reprise, tempfile
        >>> ws = reprise.init(tempfile.mkdtemp())
        >>> with reprise.start_run("old", workspace=ws) as run:
        ...     reprise.log_metric("f1", 0.8)
        >>> baseline_metrics(f"run:{run.id[:10]}", ws)
        {'f1': 0.8}
    """
    kind, _, rest = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    run_ref, _, step = rest.partition("/")
    if kind != "run" or not run_ref:
        raise UserError(f"baseline {ref!r} is not a reference Reprise understands; use one of "
                        f"{', '.join(BASELINE_FORMS)} (e.g. baseline='run:01J2Q8').")
    from reprise.tracking._api import resolve_workspace

    workspace = resolve_workspace(workspace)
    store = workspace.metadata
    workspace.recover()  # a run that just ended may not be ingested yet
    run = store.get_run(run_ref)  # RunNotFoundError / AmbiguousIdError are UserErrors
    latest = store.latest_metrics([run.id]).get(run.id, {})
    values = {key: float(point.value) for key, point in latest.items()}
    if step:
        values = {k.removeprefix(f"{step}/"): v for k, v in values.items()
                  if k.startswith(f"{step}/")}
        if not values:
            raise UserError(f"baseline {ref!r}: run {run.id} has no metrics logged by a step "
                            f"named {step!r}.")
    return values


def baseline_value(metrics: Mapping[str, float], name: str, ref: str) -> float:
    """The baseline's value of metric ``name``: the key itself, or the one ``<step>/name``."""
    if name in metrics:
        return metrics[name]
    found = sorted(k for k in metrics if k.rsplit("/", 1)[-1] == name)
    if len(found) == 1:
        return metrics[found[0]]
    if found:
        steps = [k.rsplit("/", 1)[0] for k in found]
        raise UserError(f"baseline {ref!r} has {name!r} from several steps ({', '.join(found)}); "
                        f"name one, e.g. baseline='{ref.split('/')[0]}/{steps[0]}'.")
    raise UserError(f"baseline {ref!r} has no metric {name!r}; its metrics are "
                    f"{_shortlist(sorted(metrics))}. Gate on a metric both runs log.")


def _shortlist(keys: Sequence[str], limit: int = 30) -> str:
    shown = ", ".join(keys[:limit]) or "none"
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")
