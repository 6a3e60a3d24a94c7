"""``reprise.tune``: hyperparameter search on Optuna, tracked, parallel, resumable.

The tuner process owns the study's ask/tell: it asks Optuna for a trial, hands
it to a worker (this process when ``workers=1``, else a worker process), and
tells the outcome back. Two schedules:

* default — keep ``workers`` trials in flight and tell each as it finishes
  (what ``study.optimize(n_jobs=...)`` does; fastest, order depends on timing);
* ``reproducible=True`` — ask a batch of ``batch_size`` trials (a constant, not
  the number of workers), run them, tell them back in trial order, and only
  then ask the next batch, with the sampler reseeded from ``(seed, first trial
  number of the batch)``. The sampler then sees the same history at every ask
  whatever the number of workers and the timing, and pruners decide against
  the study as it was when the batch began (see :mod:`reprise.tune._reporter`),
  so the same seed gives the same trials and the same best params.

Trials interrupted by a dead worker are failed and retried at once. Trials of
a tuner that died (killed, machine lost) are found by their heartbeat: every
in-flight trial carries its tuner's host, pid and a timestamp refreshed every
``heartbeat`` seconds, and a later or concurrent tuner fails and retries a
running trial whose owner is gone or whose heartbeat is older than three
intervals. (Optuna's own heartbeat exists only for RDB storages; this one
works with the journal file too.) ``n_trials`` is the study's total, so running
the same command again resumes an interrupted study where it stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reprise.core.errors import UserError
from reprise.tune._samplers import SAMPLERS
from reprise.tune._scheduler import TuneResult, _Settings, _Tuner
from reprise.tune._space import SearchSpace, load_space
from reprise.tune._trial import (
    FunctionObjective,
    Objective,
    PipelineObjective,
)

__all__ = ["TuneResult", "tune"]


def tune(objective: Any, space: SearchSpace | Mapping[str, Any] | str | None = None, *,
         n_trials: int | None = None, timeout: float | None = None, direction: str = "minimize",
         metric: str | None = None, params: Mapping[str, Any] | None = None,
         sampler: str = "tpe", pruner: str | None = "median", prune_on: str | None = None,
         warmup_steps: int = 0, study: str | None = None, workers: int = 1,
         executor: str | None = None, ray_address: str | None = None,
         reproducible: bool = False, batch_size: int = 4, seed: int = 0,
         pipeline_workers: int = 1, heartbeat: float = 10.0, max_retries: int = 2,
         catch: bool = False, report: bool = True, workspace: Any = None) -> TuneResult:
    """Search ``space`` for the params that optimise ``objective``.

    Args:
        objective: a function ``params -> float`` (or ``optuna_trial -> float``
            with ``space=None``, one worker), a ``@pipeline``, or a pipeline
            reference ``"FILE.py:PIPELINE"``; a pipeline needs ``metric``.
        space: the search space (see :mod:`reprise.tune._space`): a mapping or
            a YAML file.
        n_trials: the study's total number of trials (a resumed study counts
            those it has); ``timeout``: seconds for this call. One is needed,
            except with the grid sampler (the grid's size).
        direction: ``"minimize"`` or ``"maximize"``.
        metric: for a pipeline, the run metric ``STEP/KEY`` to optimise.
        params: fixed pipeline params for every trial.
        sampler: ``"tpe"``, ``"random"``, ``"grid"`` or ``"cmaes"``.
        pruner: ``"median"``, ``"hyperband"``, ``"successive_halving"`` or None;
            fed by the Trainer's validation metrics (step = the validation's
            number) and by cross-validation folds (step = the fold); ``prune_on``
            picks the metric, ``warmup_steps`` how many steps pass before the
            median pruner judges (it also waits for 5 complete trials).
        study: the study's name (default: the objective's); a study that
            exists is resumed.
        workers: trials run at once, each in its own process when > 1 (with
            ``executor="ray"``: Ray tasks in flight at once).
        executor: ``"local"`` (this process, or worker processes) or ``"ray"``: each
            trial a Ray task (see :mod:`reprise.tune._ray`); every Ray node must see
            the workspace folder at the same path. None: ``[executor] kind`` of the
            workspace's config.toml, as for ``reprise run`` (there it places steps,
            here trials; a trial's own pipeline run executes its steps in the trial's
            process, never on a second executor).
        ray_address: the Ray cluster (``HOST:PORT`` of the head, ``auto``,
            ``ray://HOST:PORT``); None: ``[executor] address`` of config.toml, else
            ``RAY_ADDRESS``, else a local Ray started here.
        reproducible: synchronous batches told in trial order (see above).
        batch_size: trials per batch in reproducible mode.
        seed: seeds the sampler and every trial (and each pipeline run).
        pipeline_workers: ``--workers`` of each pipeline run inside a trial.
        heartbeat: seconds between heartbeats of running trials.
        max_retries: times a trial whose worker died is retried.
        catch: record a failing trial and go on, instead of stopping.
        report: store the study's HTML report (``tuning.html``) on the tuning run.

    Example:
        >>> import reprise, tempfile
        >>> ws = reprise.init(tempfile.mkdtemp())
        >>> res = tune(lambda p: (p["x"] - 2) ** 2, {"x": {"low": -5.0, "high": 5.0}},
        ...            n_trials=20, workspace=ws, pruner=None)
        >>> abs(res.best_params["x"] - 2) < 1.5
        True
    """
    from reprise.tracking._api import resolve_workspace

    ws = resolve_workspace(workspace)
    executor = executor or ws.config.executor  # the workspace's [executor], as `reprise run`
    if ray_address is None and executor == "ray":
        ray_address = ws.config.executor_address or None
    obj, default_name = _objective(objective, metric, params, seed, pipeline_workers)
    spc = load_space(space) if space is not None else None
    settings = _settings(ws, default_name, spc, obj, study=study, n_trials=n_trials,
                         timeout=timeout, direction=direction, sampler=sampler, pruner=pruner,
                         warmup=warmup_steps, monitor=prune_on, workers=workers,
                         executor=executor, ray_address=ray_address,
                         reproducible=reproducible, batch_size=batch_size, seed=seed,
                         heartbeat=heartbeat, max_retries=max_retries, catch=catch,
                         report=report)
    return _Tuner(ws, obj, spc, settings).run()


def _objective(objective: Any, metric: str | None, params: Mapping[str, Any] | None,
               seed: int, pipeline_workers: int) -> tuple[Objective, str]:
    from reprise.pipeline._pipeline import Pipeline

    if isinstance(objective, Objective):
        return objective, objective.name
    if isinstance(objective, str) or isinstance(objective, Pipeline):
        if metric is None:
            raise UserError("tuning a pipeline needs metric='STEP/KEY' (--metric): the run "
                            "metric whose last value is the trial's value")
        ref = objective if isinstance(objective, str) else _pipeline_ref(objective)
        obj = PipelineObjective(ref, metric, params, seed=seed, workers=pipeline_workers)
        return obj, obj.name
    if params:
        raise UserError("params= fixes pipeline parameters; a function objective takes its "
                        "fixed values itself")
    fn = FunctionObjective(objective)
    return fn, fn.name


def _pipeline_ref(pipe: Any) -> str:
    from reprise.pipeline._execute import module_file

    if pipe.module in ("__main__", "__mp_main__"):
        path = module_file(pipe.module)
        if path is None:
            raise UserError(f"cannot tune pipeline {pipe.name!r}: its module has no file")
        return f"{path}:{pipe.func.__name__}"
    return f"{pipe.module}:{pipe.func.__name__}"


def _settings(ws: Any, name: str, space: SearchSpace | None, obj: Objective,
              **kw: Any) -> _Settings:
    from reprise.tune._reporter import make_pruner
    from reprise.tune._storage import storage_url

    if kw["direction"] not in ("minimize", "maximize"):
        raise UserError(f"direction must be 'minimize' or 'maximize'; got {kw['direction']!r}")
    if kw["sampler"] not in SAMPLERS:
        raise UserError(f"sampler {kw['sampler']!r} is not one of {list(SAMPLERS)}")
    make_pruner(kw["pruner"])  # validates the name
    for key in ("workers", "batch_size"):
        v = kw[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UserError(f"{key} must be a positive integer; got {v!r}")
    n, timeout = kw["n_trials"], kw["timeout"]
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise UserError(f"n_trials must be a positive integer; got {n!r}")
    if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
        raise UserError(f"timeout must be a positive number of seconds; got {timeout!r}")
    if kw["executor"] not in ("local", "ray"):
        raise UserError(f"executor must be 'local' or 'ray'; got {kw['executor']!r}")
    if kw["ray_address"] is not None and kw["executor"] != "ray":
        raise UserError("ray_address (--ray-address) is for executor='ray' (--executor ray)")
    if not kw["heartbeat"] > 0 or kw["max_retries"] < 0:
        raise UserError("heartbeat must be > 0 seconds and max_retries >= 0")
    if space is None and (kw["workers"] > 1 or kw["reproducible"] or kw["executor"] != "local"
                          or not isinstance(obj, FunctionObjective) or kw["sampler"] == "grid"):
        raise UserError("without a search space the objective samples its own params "
                        "(define-by-run), which works with one local worker, a function "
                        "objective, no grid and no reproducible mode; declare the space to "
                        "go further")
    if kw["sampler"] == "grid":
        assert space is not None
        size = space.grid_size()
        n = size if n is None else min(n, size)
    if n is None and timeout is None:
        raise UserError("give n_trials (--trials) or timeout (--timeout), or both")
    if isinstance(obj, PipelineObjective):
        obj.check(list(space.spec) if space else [])
    study = kw["study"] or name
    return _Settings(study=study, storage=storage_url(ws), direction=kw["direction"],
                     sampler=kw["sampler"], pruner=kw["pruner"], warmup=kw["warmup"],
                     monitor=kw["monitor"], n_trials=n, timeout=timeout,
                     workers=kw["workers"], executor=kw["executor"],
                     ray_address=kw["ray_address"], reproducible=kw["reproducible"],
                     batch_size=kw["batch_size"], seed=kw["seed"],
                     heartbeat=float(kw["heartbeat"]), max_retries=int(kw["max_retries"]),
                     catch=bool(kw["catch"]), report=bool(kw["report"]))


