"""One trial: a tracked child run around the objective, with its reporter installed.

A trial runs in the tuner's process (one worker) or in a worker process; either
way :func:`run_trial` starts a run of kind ``trial`` under the tuning run (the
params, ``intermediate/*`` values, ``value`` and the trial's state are on it),
installs the trial's reporter for this process and, through ``REPRISE_TRIAL``,
for the processes the objective starts (pipeline step workers), seeds the
generators from the trial's seed, calls the objective and returns an outcome.
The tuner, not the trial, tells Optuna the result.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from reprise.core.errors import TrialPruned, UserError

__all__ = ["FunctionObjective", "Objective", "PipelineObjective", "TrialOutcome", "TrialTask",
           "run_trial"]


class Objective:
    """What a trial evaluates; sent to worker processes by value (cloudpickle)."""

    name: str = "objective"

    def __call__(self, params: dict[str, Any], trial: Any) -> float:
        raise NotImplementedError


class FunctionObjective(Objective):
    """``fn(params) -> float``, or ``fn(trial) -> float`` for a define-by-run search."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise UserError(f"the objective must be a function or a pipeline; got {fn!r}")
        self.fn = fn
        self.name = getattr(fn, "__name__", "objective")

    def __call__(self, params: dict[str, Any], trial: Any) -> float:
        return _as_value(self.fn(params if params or trial is None else trial), self.name)


class PipelineObjective(Objective):
    """Each trial runs the pipeline with the trial's params; the value is a run metric.

    ``metric`` names a metric of the pipeline run, ``STEP/KEY`` (as ``reprise
    runs show`` lists them); its last value is the trial's value. A trial runs
    the metric's step and what it depends on, nothing downstream (evaluation
    gates, registration belong to the final run). Steps that do not depend on
    the tuned params are reused from the cache across trials.
    """

    def __init__(self, ref: str, metric: str, fixed: Mapping[str, Any] | None = None, *,
                 seed: int = 0, workers: int = 1) -> None:
        self.ref, self.metric, self.fixed = ref, metric, dict(fixed or {})
        self.seed, self.workers = seed, workers
        self.name = ref.rpartition(":")[2]
        self._pipe: Any = None

    def pipeline(self) -> Any:
        if self._pipe is None:
            from reprise.pipeline._load import load_pipeline

            self._pipe = load_pipeline(self.ref)
        return self._pipe

    def check(self, space_names: list[str]) -> None:
        """Refuse, before any trial, params the pipeline does not take."""
        accepted = set(self.pipeline().signature.parameters)
        unknown = sorted((set(space_names) | set(self.fixed)) - accepted)
        if unknown:
            raise UserError(f"pipeline {self.ref!r} has no parameter(s) {unknown} to tune; its "
                            f"parameters are {sorted(accepted)}")
        clash = sorted(set(space_names) & set(self.fixed))
        if clash:
            raise UserError(f"parameter(s) {clash} are both tuned and fixed with -p; drop one")
        if "/" not in self.metric:
            raise UserError(f"metric {self.metric!r} must name a step metric as STEP/KEY "
                            "(e.g. evaluate/f1), as `reprise runs show RUN` lists them")
        steps = list(self.pipeline().build(self.fixed).nodes)
        if self.metric.partition("/")[0] not in steps:
            raise UserError(f"metric {self.metric!r}: pipeline {self.ref!r} has no step "
                            f"{self.metric.partition('/')[0]!r}; its steps are {steps}")

    def __call__(self, params: dict[str, Any], trial: Any) -> float:
        from reprise.pipeline._runner import run_pipeline

        step, _, key = self.metric.partition("/")
        # executor="local": the trial is the unit the tuner placed (a local worker or a
        # Ray task); its steps run here, whatever [executor] config.toml names (else each
        # trial would start, or join, a Ray of its own).
        result = run_pipeline(self.pipeline(), {**self.fixed, **params}, seed=self.seed,
                              workers=self.workers, pipeline_ref=self.ref, steps=[step],
                              executor="local")
        state = result.nodes.get(step)
        points = [v for k, v, _ in (state.metrics if state else []) if k == key]
        if not points:
            have = sorted(f"{n}/{k}" for n, s in result.nodes.items() for k, _, _ in s.metrics)
            raise UserError(f"pipeline run {result.run_id} logged no metric {self.metric!r}; "
                            f"it logged {have or 'none'}")
        return _as_value(points[-1], self.metric)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pipe": None}


def _as_value(value: Any, what: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{what} must return a number; it returned {value!r}") from None
    return out


@dataclass
class TrialTask:
    """Everything a worker needs to run one trial (plain data, sent between processes)."""

    number: int
    trial_id: int
    params: dict[str, Any]
    study: str
    storage: str
    workspace: str
    parent_run: str
    seed: int
    pruner: str | None = None
    warmup: int = 0
    monitor: str | None = None
    frozen_before: int | None = None
    run_id: str | None = None  # allocated by the tuner, recorded with the trial's owner


@dataclass
class TrialOutcome:
    number: int
    trial_id: int
    state: str  # complete | pruned | fail
    value: float | None = None
    error: str | None = None
    run_id: str | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def run_trial(task: TrialTask, objective: Objective, study: Any = None) -> TrialOutcome:
    """Run ``objective`` as trial ``task``; never raises for the objective's errors."""
    import optuna

    from reprise.core._report import reporting_to
    from reprise.pipeline._execute import seeded
    from reprise.tracking._api import open_workspace, start_run
    from reprise.tune._reporter import TrialReporter, make_pruner, trial_env
    from reprise.tune._storage import open_storage

    t0 = time.perf_counter()
    ws = open_workspace(task.workspace)
    if study is None:
        study = optuna.load_study(study_name=task.study, storage=open_storage(task.storage),
                                  pruner=make_pruner(task.pruner, warmup=task.warmup),
                                  sampler=optuna.samplers.RandomSampler(0))
    run = start_run(f"trial-{task.number}", params=task.params or None, kind="trial",
                    parent=task.parent_run, workspace=ws, system_metrics_interval=0,
                    defer_ingest=True, run_id=task.run_id,
                    tags={"reprise.study": task.study, "reprise.trial": task.number})
    out = TrialOutcome(task.number, task.trial_id, "fail", run_id=run.id)
    env = trial_env(task.storage, task.study, task.trial_id, task.pruner, task.warmup,
                    task.monitor, task.frozen_before)
    try:
        reporter = TrialReporter(study, task.trial_id, monitor=task.monitor,
                                 frozen_before=task.frozen_before, run=run,
                                 pruner=make_pruner(task.pruner, warmup=task.warmup)
                                 if task.frozen_before is not None else None)
        trial = reporter.trial if not task.params else None
        with reporting_to(reporter), _environ("REPRISE_TRIAL", env), seeded(task.seed):
            value = objective(task.params, trial)
        if math.isnan(value):
            out.error = "the objective returned NaN"
        else:
            out.state, out.value = "complete", value
    except (TrialPruned, optuna.TrialPruned):
        out.state = "pruned"
    except Exception as exc:  # noqa: BLE001 - the objective's failure is the trial's
        out.error = "".join(traceback.format_exception(exc))
        if isinstance(exc, UserError):
            out.extra["user_error"] = str(exc)
    if out.state == "fail" and _pruned_elsewhere(study, task.trial_id):
        out.state, out.error = "pruned", None  # pruned inside a pipeline worker process
    out.seconds = time.perf_counter() - t0
    if out.value is not None:
        run.log_metric("value", out.value)
    run.set_tag("reprise.trial_state", out.state)
    run.end("failed" if out.state == "fail" else "finished", error=out.error)
    return out


def _pruned_elsewhere(study: Any, trial_id: int) -> bool:
    from reprise.tune._reporter import PRUNED_ATTR

    return PRUNED_ATTR in study._storage.get_trial(trial_id).system_attrs


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
