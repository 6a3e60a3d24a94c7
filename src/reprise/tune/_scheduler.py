"""The tuner's loop: it asks Optuna for trials, hands them to its runner, tells the
outcomes back (as they finish, or batch by batch in trial order when reproducible),
and fails or re-runs the trials of a tuner that died.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from reprise.core._hashing import hash_value
from reprise.core.errors import UserError
from reprise.tune._runners import _BATCH, _OWNER, _RETRIED, _RETRY_OF, _alive, _Heartbeat, _pack, _runner
from reprise.tune._samplers import make_sampler
from reprise.tune._space import SearchSpace
from reprise.tune._trial import (
    Objective,
    PipelineObjective,
    TrialOutcome,
    TrialTask,
)


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
    executor: str
    ray_address: str | None
    reproducible: bool
    batch_size: int
    seed: int
    heartbeat: float
    max_retries: int
    catch: bool
    report: bool


class _Tuner:
    def __init__(self, ws: Any, objective: Objective, space: SearchSpace | None,
                 s: _Settings) -> None:
        self.ws, self.objective, self.space, self.s = ws, objective, space, s
        # refused before the study when it cannot travel
        self.payload = _pack(objective) if s.workers > 1 or s.executor == "ray" else b""
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
        # the runner first: one that cannot start (a Ray address refused) leaves no
        # tuning run behind, neither recorded nor active in this process
        runner = _runner(self.s, self.objective, self.payload, self.study,
                         self.ws.config.workspace_dir)
        try:
            self.run_ = start_run(f"tune:{self.s.study}", params={"tune": params},
                                  kind="tuning", workspace=self.ws, system_metrics_interval=0,
                                  tags={"reprise.study": self.s.study})
        except BaseException:
            runner.close(kill=True)
            raise
        self.t0 = time.monotonic()
        beat = _Heartbeat(self.storage, self.s.heartbeat)
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
            while runner.idle() and (task := self._ask_next()) is not None:
                self._dispatch(runner, task)
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

    def _ask_next(self) -> TrialTask | None:
        """The next trial, if the study may have one more: counted and asked under the
        study's ask lock (tuners sharing the study would otherwise both ask the last)."""
        from reprise.tune._storage import ask_lock

        with ask_lock(self.s.storage, self.s.study):
            return self._ask() if self._may_ask() else None

    def _ask(self) -> TrialTask:
        trial = self.study.ask(self.dists)
        return self._task(trial.number, trial._trial_id, dict(trial.params))

    def _ask_batch(self) -> list[TrialTask]:
        """The next batch: stale trials of this study first (re-run in place, same
        numbers, with the rest of their batch if a killed tuner had not asked all of it),
        else up to ``batch_size`` new ones from a sampler reseeded from the batch's first
        trial number, so that the draws never depend on timing."""
        tasks, self._adopted = sorted(self._adopted, key=lambda t: t.number), []
        if tasks:
            tasks += self._finish_open_batch()
        else:
            first = len(self.study.get_trials(deepcopy=False))
            self.study.sampler = make_sampler(self.s.sampler, _mix(self.s.seed, first),
                                              self.space)
            # before the first ask: a trial that a killed tuner created but did not finish
            # asking, and the trials of its batch it never asked, are drawn again (_replay)
            self.storage.set_study_system_attr(self.study._study_id, _BATCH, first)
            while len(tasks) < self.s.batch_size and (task := self._ask_next()) is not None:
                tasks.append(task)
        first_number = min((t.number for t in tasks), default=0)
        for t in tasks:
            if t.frozen_before is None:  # adopted trials keep the batch they were asked in
                t.frozen_before = first_number
                self.storage.set_trial_system_attr(t.trial_id, _BATCH, first_number)
        return tasks

    def _open_batch(self) -> int | None:
        first = self.storage.get_study_system_attrs(self.study._study_id).get(_BATCH)
        return None if first is None else int(first)

    def _finish_open_batch(self) -> list[TrialTask]:
        """The trials of the last batch that its (killed) tuner never asked, with the
        params the uninterrupted search gives them."""
        first, n = self._open_batch(), len(self.study.get_trials(deepcopy=False))
        if self.dists is None or first is None or not first < n < first + self.s.batch_size:
            return []
        draws = self._replay(first, first + self.s.batch_size)
        tasks: list[TrialTask] = []
        for number in range(n, first + self.s.batch_size):
            if not self._may_ask():
                break
            self.study.enqueue_trial(draws[number - first], skip_if_exists=False)
            tasks.append(self._ask())
            tasks[-1].frozen_before = first
            self.storage.set_trial_system_attr(tasks[-1].trial_id, _BATCH, first)
        return tasks

    def _replay(self, first: int, end: int) -> list[dict[str, Any]]:
        """The params that the batch starting at trial ``first`` draws for trials
        ``first`` to ``end - 1``: its draws replayed on a copy of the study as it was
        when the batch was asked, with the batch's seed."""
        import optuna

        copy = optuna.create_study(
            direction="maximize" if self.s.direction == "maximize" else "minimize",
            sampler=make_sampler(self.s.sampler, _mix(self.s.seed, first), self.space))
        copy.add_trials([t for t in self.study.get_trials() if t.number < first])
        return [dict(copy.ask(self.dists).params) for _ in range(first, end)]

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
                self._fail_and_retry(item.task.trial_id, item.reason or (
                    f"its worker process died (exit code {item.exitcode})"))
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
                    params = dict(t.params)
                    if self.dists is not None and set(params) != set(self.dists):
                        params = self._redraw(t.number)
                        for name, value in params.items():
                            if name not in t.params:  # the study records what it ran
                                dist = self.dists[name]
                                self.storage.set_trial_param(
                                    t._trial_id, name, dist.to_internal_repr(value), dist)
                    task = self._task(t.number, t._trial_id, params)
                    task.frozen_before = t.system_attrs.get(_BATCH)
                    self._adopted.append(task)
                else:
                    self._fail_and_retry(t._trial_id, "its tuner stopped sending heartbeats")

    def _redraw(self, number: int) -> dict[str, Any]:
        """The params of trial ``number``, which a killed tuner created and did not finish
        asking (Optuna's ``ask`` writes the trial, then each param, one journal entry
        each). No worker saw the trial, so nothing else is lost."""
        first = self._open_batch()
        if first is None or not first <= number < first + self.s.batch_size:
            raise UserError(f"trial {number} of study {self.s.study!r} was created without "
                            "its params, by a tuner that stopped; its draw cannot be "
                            "replayed — resume without reproducible=True (--reproducible) "
                            "or name a new study")
        return self._replay(first, number + 1)[-1]

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
