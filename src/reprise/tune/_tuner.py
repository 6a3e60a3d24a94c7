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

import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from reprise.core._hashing import hash_value
from reprise.core.errors import UserError
from reprise.tune._space import SearchSpace, load_space
from reprise.tune._trial import (
    FunctionObjective,
    Objective,
    PipelineObjective,
    TrialOutcome,
    TrialTask,
    run_trial,
)

__all__ = ["TuneResult", "tune"]

SAMPLERS = ("tpe", "random", "grid", "cmaes")
_OWNER, _RETRIED, _RETRY_OF, _BATCH = ("reprise_owner", "reprise_retried", "reprise_retry_of",
                                       "reprise_batch")


@dataclass
class TuneResult:
    """What a :func:`tune` call did; ``best_params`` feeds a final training."""

    study: str
    direction: str
    best_value: float | None
    best_params: dict[str, Any]
    best_trial: int | None
    run_id: str
    counts: dict[str, int]
    trials: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass
class _Settings:
    study: str
    storage: str
    direction: str
    sampler: str
    pruner: str | None
    warmup: int
    monitor: str | None
    n_trials: int | None
    timeout: float | None
    workers: int
    reproducible: bool
    batch_size: int
    seed: int
    heartbeat: float
    max_retries: int
    catch: bool
    report: bool


def tune(objective: Any, space: SearchSpace | Mapping[str, Any] | str | None = None, *,
         n_trials: int | None = None, timeout: float | None = None, direction: str = "minimize",
         metric: str | None = None, params: Mapping[str, Any] | None = None,
         sampler: str = "tpe", pruner: str | None = "median", prune_on: str | None = None,
         warmup_steps: int = 0, study: str | None = None, workers: int = 1,
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
        workers: trials run at once, each in its own process when > 1.
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
    from reprise.tracking._api import open_workspace

    ws = workspace if workspace is not None else open_workspace()
    obj, default_name = _objective(objective, metric, params, seed, pipeline_workers)
    spc = load_space(space) if space is not None else None
    settings = _settings(ws, default_name, spc, obj, study=study, n_trials=n_trials,
                         timeout=timeout, direction=direction, sampler=sampler, pruner=pruner,
                         warmup=warmup_steps, monitor=prune_on, workers=workers,
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
    if not kw["heartbeat"] > 0 or kw["max_retries"] < 0:
        raise UserError("heartbeat must be > 0 seconds and max_retries >= 0")
    if space is None and (kw["workers"] > 1 or kw["reproducible"] or
                          not isinstance(obj, FunctionObjective) or kw["sampler"] == "grid"):
        raise UserError("without a search space the objective samples its own params "
                        "(define-by-run), which works with one worker, a function objective, "
                        "no grid and no reproducible mode; declare the space to go further")
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
                     workers=kw["workers"], reproducible=kw["reproducible"],
                     batch_size=kw["batch_size"], seed=kw["seed"],
                     heartbeat=float(kw["heartbeat"]), max_retries=int(kw["max_retries"]),
                     catch=bool(kw["catch"]), report=bool(kw["report"]))


def make_sampler(name: str, seed: int, space: SearchSpace | None) -> Any:
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        assert space is not None
        return _GridSampler(space.grid(), seed=seed)
    return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)


def _grid_sampler_class() -> Any:
    import optuna

    class GridSampler(optuna.samplers.GridSampler):  # type: ignore[misc]
        """Optuna's grid sampler without its ``study.stop()`` once the grid is done: that
        call works only inside ``study.optimize``, and the tuner asks and tells itself
        (it stops at the grid's size)."""

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return GridSampler


def _GridSampler(grid: dict[str, list[Any]], *, seed: int) -> Any:  # noqa: N802
    return _grid_sampler_class()(grid, seed=seed)


class _Tuner:
    def __init__(self, ws: Any, objective: Objective, space: SearchSpace | None,
                 s: _Settings) -> None:
        self.ws, self.objective, self.space, self.s = ws, objective, space, s
        self.payload = _pack(objective) if s.workers > 1 else b""  # refused before the study
        self.dists = space.distributions() if space is not None else None
        self.outcomes: list[TrialOutcome] = []
        self.in_flight: dict[int, TrialTask] = {}
        # trials this tuner has taken on (asked, or adopted from a dead tuner) and not yet
        # told: RUNNING in the study while queued, in flight, or finished and waiting for
        # their batch to be told in order, but never stale
        self.mine: set[int] = set()
        self.failure: TrialOutcome | None = None
        self.me = {"host": socket.gethostname(), "pid": os.getpid()}
        self._last_sweep = 0.0
        self._adopted: list[TrialTask] = []
        self._ingested = 0

    # -- set-up ----------------------------------------------------------------------------

    def _open_study(self) -> Any:
        import optuna

        from reprise.tune._reporter import make_pruner
        from reprise.tune._storage import open_storage

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.storage = open_storage(self.s.storage)
        study = optuna.create_study(
            storage=self.storage, study_name=self.s.study,
            direction="maximize" if self.s.direction == "maximize" else "minimize",
            load_if_exists=True, sampler=make_sampler(self.s.sampler, self.s.seed, self.space),
            pruner=make_pruner(self.s.pruner, warmup=self.s.warmup))
        recorded = {"space": self.space.spec if self.space else None,
                    "direction": self.s.direction, "objective": _describe(self.objective)}
        before = study.user_attrs.get("reprise")
        if before is None:
            study.set_user_attr("reprise", recorded)
        elif before != recorded:
            diff = sorted(k for k in recorded if before.get(k) != recorded[k])
            raise UserError(f"study {self.s.study!r} exists with another {', '.join(diff)}; "
                            "resume it with the same settings, or name a new study "
                            "(study= / --study)")
        return study

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> TuneResult:
        from reprise.tracking._api import start_run

        self.study = self._open_study()
        params = {k: v for k, v in vars(self.s).items() if k not in ("storage",)}
        self.run_ = start_run(f"tune:{self.s.study}", params={"tune": params}, kind="tuning",
                              workspace=self.ws, system_metrics_interval=0,
                              tags={"reprise.study": self.s.study})
        self.t0 = time.monotonic()
        beat = _Heartbeat(self.storage, self.s.heartbeat)
        runner = _runner(self.s.workers, self.objective, self.payload, self.study)
        try:
            with beat:
                self.beat = beat
                self._recover_stale(force=True)
                self._loop(runner)
        except BaseException as exc:
            # trials in flight stay RUNNING in the study: the next tuner finds them by
            # their owner and heartbeat and runs them again
            runner.close(kill=True)
            if isinstance(exc, KeyboardInterrupt):
                self.run_.end("killed", error="interrupted (KeyboardInterrupt)")
            else:
                import traceback

                self.run_.end("failed", error="".join(traceback.format_exception(exc)))
            self._ingest_trials()
            raise
        runner.close()
        return self._finish()

    def _loop(self, runner: Any) -> None:
        (self._batches if self.s.reproducible else self._async)(runner)

    def _async(self, runner: Any) -> None:
        """Keep every worker busy; tell each trial as it finishes."""
        while True:
            while runner.idle() and self._may_ask():
                self._dispatch(runner, self._ask())
            if not runner.busy():
                if not self._others_running():
                    return
                time.sleep(min(self.s.heartbeat, 1.0))  # they finish, or go stale and
                self._recover_stale()                   # are retried here
                continue
            for item in runner.wait(self.s.heartbeat):
                outcome = self._collect(item)
                if outcome is not None:
                    self._tell(outcome)
            self._recover_stale()

    def _batches(self, runner: Any) -> None:
        """Ask a batch, run it, tell it in trial order; then the next batch."""
        while self._others_running() and not self._adopted:  # a tuner killed mid-batch:
            time.sleep(min(self.s.heartbeat, 1.0))  # wait until its trials are stale,
            self._recover_stale()                   # then run them first, as they were
        while True:
            batch = self._ask_batch()
            if not batch:
                return
            queue, done = list(batch), {}
            while queue or self.in_flight:
                while queue and runner.idle():
                    self._dispatch(runner, queue.pop(0))
                for item in runner.wait(self.s.heartbeat):
                    outcome = self._collect(item)
                    if outcome is None:  # its worker died: run the same trial again
                        queue.insert(0, item.task)
                    else:
                        done[outcome.number] = outcome
                self._recover_stale()
            for number in sorted(done):
                self._tell(done[number])

    def _others_running(self) -> bool:
        """Running trials of this study that no worker of this tuner runs."""
        from optuna.trial import TrialState

        return any(t._trial_id not in self.mine
                   for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))

    def _may_ask(self) -> bool:
        if self.failure is not None:
            return False
        if self.s.timeout is not None and time.monotonic() - self.t0 >= self.s.timeout:
            return False
        if self.s.n_trials is None:
            return True
        used, waiting = self._used()
        return used < self.s.n_trials or waiting > 0

    def _used(self) -> tuple[int, int]:
        """Trials that count toward ``n_trials`` (a failed trial that was retried does
        not: its retry does), and how many of them wait to run (retries)."""
        from optuna.trial import TrialState

        used = waiting = 0
        for t in self.study.get_trials(deepcopy=False):
            if t.state != TrialState.FAIL or not t.system_attrs.get(_RETRIED):
                used += 1
                waiting += t.state == TrialState.WAITING
        return used, waiting

    def _ask(self) -> TrialTask:
        trial = self.study.ask(self.dists)
        return self._task(trial.number, trial._trial_id, dict(trial.params))

    def _ask_batch(self) -> list[TrialTask]:
        """The next batch: stale trials of this study first (re-run in place, same
        numbers), else up to ``batch_size`` new ones from a sampler reseeded from
        the batch's first trial number, so that the draws never depend on timing."""
        tasks, self._adopted = sorted(self._adopted, key=lambda t: t.number), []
        if not tasks:
            first = len(self.study.get_trials(deepcopy=False))
            self.study.sampler = make_sampler(self.s.sampler, _mix(self.s.seed, first),
                                              self.space)
            while len(tasks) < self.s.batch_size and self._may_ask():
                tasks.append(self._ask())
        first_number = min((t.number for t in tasks), default=0)
        for t in tasks:
            if t.frozen_before is None:  # adopted trials keep the batch they were asked in
                t.frozen_before = first_number
                self.storage.set_trial_system_attr(t.trial_id, _BATCH, first_number)
        return tasks

    def _task(self, number: int, trial_id: int, params: dict[str, Any]) -> TrialTask:
        self.mine.add(trial_id)
        return TrialTask(number=number, trial_id=trial_id, params=params, study=self.s.study,
                         storage=self.s.storage, workspace=str(self.ws.root),
                         parent_run=self.run_.id, seed=_mix(self.s.seed, number),
                         pruner=self.s.pruner, warmup=self.s.warmup, monitor=self.s.monitor)

    def _dispatch(self, runner: Any, task: TrialTask) -> None:
        from reprise.core._ids import new_id

        task.run_id = new_id()  # one journal write records owner, heartbeat and run
        self.beat.add(task.trial_id, task.run_id)
        self.in_flight[task.trial_id] = task
        runner.submit(task)

    def _collect(self, item: Any) -> TrialOutcome | None:
        """A finished trial's outcome; None when its worker died (the trial is then failed
        and retried, or in reproducible mode left for the caller to run again)."""
        from reprise.tune._workers import WorkerDied

        if isinstance(item, WorkerDied):
            self._forget(item.task.trial_id)
            if not self.s.reproducible:
                self._fail_and_retry(item.task.trial_id, f"its worker process died (exit "
                                                         f"code {item.exitcode})")
            return None
        self._forget(item.trial_id)
        return item  # type: ignore[no-any-return]

    def _forget(self, trial_id: int) -> None:
        self.in_flight.pop(trial_id, None)
        self.beat.discard(trial_id)

    def _ingest_trials(self) -> None:
        """Trial runs are journaled with ``defer_ingest``; ingest the finished ones in one
        transaction (every 50 trials, and at the end), then what they started."""
        runs = [o.run_id for o in self.outcomes[self._ingested:] if o.run_id]
        self._ingested = len(self.outcomes)
        self.ws.ingest_finished(runs)
        self.ws.recover()  # pipeline runs started inside trials, killed workers' trials

    def _tell(self, out: TrialOutcome) -> None:
        from optuna.trial import TrialState

        self.outcomes.append(out)
        self.mine.discard(out.trial_id)
        if len(self.outcomes) - self._ingested >= 50:
            self._ingest_trials()
        state = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED,
                 "fail": TrialState.FAIL}[out.state]
        import optuna

        try:
            self.study.tell(out.number, out.value if out.state == "complete" else None,
                            state=state, skip_if_finished=True)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError) as exc:
            import logging  # finished elsewhere (failed as stale by another tuner)

            logging.getLogger(__name__).warning("trial %d: %s", out.number, exc)
        if out.state == "fail" and not self.s.catch and self.failure is None:
            self.failure = out

    # -- dead trials -----------------------------------------------------------------------

    def _recover_stale(self, *, force: bool = False) -> None:
        """Fail (and retry) running trials whose tuner is gone; see the module docstring."""
        from optuna.trial import TrialState

        now = time.time()
        if not force and now - self._last_sweep < self.s.heartbeat:
            return
        self._last_sweep = now
        grace = 3 * self.s.heartbeat
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t._trial_id in self.mine:
                continue
            owner = t.system_attrs.get(_OWNER) or {}
            beat = owner.get("beat") or (t.datetime_start.timestamp()
                                         if t.datetime_start else now)
            gone = owner.get("host") == self.me["host"] and owner.get("pid") != self.me["pid"] \
                and not _alive(int(owner.get("pid") or 0))
            if gone or now - float(beat) > grace:
                if self.s.reproducible:  # re-run the same trial in place, same number
                    task = self._task(t.number, t._trial_id, dict(t.params))
                    task.frozen_before = t.system_attrs.get(_BATCH)
                    self._adopted.append(task)
                else:
                    self._fail_and_retry(t._trial_id, "its tuner stopped sending heartbeats")

    def _fail_and_retry(self, trial_id: int, why: str) -> None:
        """Fail a running trial and enqueue its params again (up to ``max_retries``)."""
        import logging

        import optuna
        from optuna.trial import TrialState

        trial = self.storage.get_trial(trial_id)
        retries = int(trial.user_attrs.get("reprise_retries", 0))
        retry = retries < self.s.max_retries
        try:  # the marker first: a failed trial can no longer be written to
            if retry:
                self.storage.set_trial_system_attr(trial_id, _RETRIED, True)
            if not self.storage.set_trial_state_values(trial_id, TrialState.FAIL):
                return
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError):
            return  # another tuner got there first
        if not retry:
            logging.getLogger(__name__).warning(
                "trial %d failed: %s; not retried (max_retries=%d)", trial.number, why,
                self.s.max_retries)
            return
        logging.getLogger(__name__).warning("trial %d failed: %s; retrying its params",
                                            trial.number, why)
        self.study.enqueue_trial(dict(trial.params), user_attrs={
            "reprise_retries": retries + 1,
            _RETRY_OF: trial.user_attrs.get(_RETRY_OF, trial.number)}, skip_if_exists=False)

    # -- the end ---------------------------------------------------------------------------

    def _finish(self) -> TuneResult:
        from reprise.tune._summary import describe_study, study_html

        info = describe_study(self.study)
        best = info["best"] or {}
        counts = info["counts"]
        result = TuneResult(study=self.s.study, direction=self.s.direction,
                            best_value=best.get("value"), best_params=best.get("params") or {},
                            best_trial=best.get("number"), run_id=self.run_.id, counts=counts,
                            trials=info["trials"])
        metrics = {f"trials_{k}": float(v) for k, v in counts.items()}
        if result.best_value is not None:
            metrics["best_value"] = float(result.best_value)
        self.run_.log_metrics(metrics)
        if result.best_trial is not None:
            self.run_.set_tag("reprise.best_trial", result.best_trial)
        if self.s.report and info["trials"]:
            self.run_.log_artifact(study_html(self.study, info).encode(), "tuning.html")
        failure = self.failure
        self.run_.end("failed" if failure else "finished",
                      error=failure.error if failure else None)
        self._ingest_trials()
        if failure is not None:
            msg = failure.extra.get("user_error") or (failure.error or "").strip().splitlines()[-1]
            raise UserError(f"trial {failure.number} of study {self.s.study!r} failed: {msg} "
                            f"(the trial's run is {failure.run_id}; pass catch=True / --catch "
                            "to record failing trials and go on)")
        return result


def _describe(obj: Objective) -> str:
    if isinstance(obj, PipelineObjective):
        return f"pipeline {obj.ref} metric {obj.metric}"
    return f"function {obj.name}"


def _mix(seed: int, number: int) -> int:
    return int(hash_value({"seed": seed, "trial": number})[:8], 16) & 0x7FFFFFFF


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Heartbeat:
    """Refreshes the heartbeat of this tuner's running trials every ``interval`` seconds:
    one system attribute per trial holds the owner (host, pid) and the last beat."""

    def __init__(self, storage: Any, interval: float) -> None:
        self.storage, self.interval = storage, interval
        self.me = {"host": socket.gethostname(), "pid": os.getpid()}
        self.ids: dict[int, str | None] = {}  # trial id -> its run id
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="reprise-tune-heartbeat",
                                        daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def add(self, trial_id: int, run_id: str | None = None) -> None:
        with self._lock:
            self.ids[trial_id] = run_id
        self._write(trial_id, run_id)

    def _write(self, trial_id: int, run_id: str | None) -> None:
        self.storage.set_trial_system_attr(trial_id, _OWNER, {**self.me, "beat": time.time(),
                                                              "run": run_id})

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self.ids.pop(trial_id, None)

    def _beat(self) -> None:
        # Beats are written under the lock: once discard() returns, no beat of that trial
        # can follow the trial's tell in the journal (Optuna refuses a journal in which this
        # process wrote to a finished trial, at every later sync).
        while not self._stop.wait(self.interval):
            with self._lock:
                for tid, run_id in list(self.ids.items()):
                    try:
                        self._write(tid, run_id)
                    except Exception:  # noqa: BLE001 - finished elsewhere; beat it no more
                        self.ids.pop(tid, None)


class _Inline:
    """Runs each trial in this process as it is submitted (``workers=1``)."""

    def __init__(self, objective: Objective, study: Any) -> None:
        self.objective, self.study = objective, study
        self.done: list[TrialOutcome] = []

    def idle(self) -> int:
        return 0 if self.done else 1

    def busy(self) -> int:
        return len(self.done)

    def submit(self, task: TrialTask) -> None:
        self.done.append(run_trial(task, self.objective, self.study))

    def wait(self, timeout: float | None) -> Iterator[TrialOutcome]:
        done, self.done = self.done, []
        yield from done

    def close(self, *, kill: bool = False) -> None:
        return None


def _pack(objective: Objective) -> bytes:
    from reprise.tune._workers import pack_objective

    return pack_objective(objective)


def _runner(workers: int, objective: Objective, payload: bytes, study: Any) -> Any:
    if workers == 1:
        return _Inline(objective, study)
    from reprise.tune._workers import WorkerPool

    return WorkerPool(workers, payload)

