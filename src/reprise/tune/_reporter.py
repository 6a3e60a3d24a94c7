"""The trial side of :mod:`reprise.core._report`: intermediate values into Optuna.

A :class:`TrialReporter` reports to the trial's record in the study storage
(so ``tune show`` and the pruners of later trials see it) and asks the study's
pruner whether to stop. In reproducible mode it decides against a *frozen*
copy of the study: the trials finished before the trial's batch started, in
memory, with the trial itself at its own number. The decision then depends
only on earlier batches, never on how far the other trials of the batch have
got — which is what makes pruned parallel searches repeatable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from reprise.core.errors import UserError

__all__ = ["PRUNED_ATTR", "TrialReporter", "from_env", "make_pruner", "trial_env"]

PRUNED_ATTR = "reprise_pruned_at"
PRUNERS = ("median", "hyperband", "successive_halving", "none")


def make_pruner(name: str | None, *, warmup: int = 0) -> Any:
    """An Optuna pruner by name (``None``/``"none"``: never prune)."""
    import optuna

    key = (name or "none").lower()
    if key == "median":  # 5 complete trials before judging (Optuna's default)
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=warmup)
    if key == "hyperband":
        return optuna.pruners.HyperbandPruner()
    if key == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    if key == "none":
        return optuna.pruners.NopPruner()
    raise UserError(f"pruner {name!r} is not one of {list(PRUNERS)}")


class TrialReporter:
    """Reports intermediate values of one trial; see the module docstring.

    Args:
        study: the ``optuna.Study`` (loaded with the study's pruner).
        trial_id: the trial's storage id.
        monitor: the metric to take from mappings of several metrics.
        frozen_before: in reproducible mode, the first trial number of the
            trial's batch; the pruner then sees only trials numbered below it.
        pruner: in reproducible mode, a new pruner for the frozen copy (pruners
            such as Hyperband set themselves up from the first study they see,
            so a shared one would carry state from whichever trial came first).
        run: the trial's Reprise run, to log the values on.
    """

    def __init__(self, study: Any, trial_id: int, *, monitor: str | None = None,
                 frozen_before: int | None = None, pruner: Any = None,
                 run: Any = None) -> None:
        import optuna

        self.study, self.trial_id, self.monitor, self.run = study, trial_id, monitor, run
        self.trial = optuna.trial.Trial(study, trial_id)
        self.local = _frozen_trial(study, self.trial.number, frozen_before, pruner) \
            if frozen_before is not None else None
        self.step: int | None = None
        self.key: str | None = None

    def report(self, values: Mapping[str, float] | float, step: int) -> None:
        key, value = self._pick(values)
        if not math.isfinite(value):
            return  # a NaN loss is the trainer's to stop; a pruner cannot rank it
        self.key, self.step = key, int(step)
        for trial in (self.trial, self.local):
            if trial is not None and step not in trial.storage.get_trial(
                    trial._trial_id).intermediate_values:
                trial.report(value, step)
        if self.run is not None:
            self.run.log_metric(f"intermediate/{key}", value, step=int(step))

    def should_prune(self) -> bool:
        if self.step is None:
            return False
        trial = self.local if self.local is not None else self.trial
        prune = bool(trial.should_prune())
        if self.local is not None:  # rung records the pruner keeps on the trial
            attrs = self.local.storage.get_trial(self.local._trial_id).system_attrs
            for k, v in attrs.items():
                self.study._storage.set_trial_system_attr(self.trial_id, k, v)
        if prune:
            self.study._storage.set_trial_system_attr(self.trial_id, PRUNED_ATTR, self.step)
        return prune

    def _pick(self, values: Mapping[str, float] | float) -> tuple[str, float]:
        if not isinstance(values, Mapping):
            return self.monitor or "value", float(values)
        if self.monitor is not None:
            if self.monitor not in values:
                raise UserError(f"tuning monitors {self.monitor!r} for pruning, but the "
                                f"intermediate results hold {sorted(values)}; set prune_on= "
                                "(--prune-on) to one of them")
            return self.monitor, float(values[self.monitor])
        if len(values) == 1:
            (key, value), = values.items()
            return key, float(value)
        if "val_loss" in values:
            return "val_loss", float(values["val_loss"])
        raise UserError(f"intermediate results hold several metrics {sorted(values)}; say which "
                        "one the pruner compares with prune_on= (--prune-on)")


def _frozen_trial(study: Any, number: int, before: int, pruner: Any) -> Any:
    """A trial numbered ``number`` in an in-memory copy of ``study`` that holds only the
    trials numbered below ``before`` (placeholders fill the numbers in between)."""
    import optuna
    from optuna.trial import TrialState

    if pruner is None:
        raise ValueError("a frozen copy needs its own pruner")
    # A fixed name: Hyperband assigns trials to brackets by a hash of the study's name and
    # the trial number, and a reproducible search must not depend on what it is called.
    local = optuna.create_study(storage=optuna.storages.InMemoryStorage(),
                                study_name="reprise-reproducible", directions=study.directions,
                                pruner=pruner, sampler=optuna.samplers.RandomSampler(0))
    earlier = [t for t in study.get_trials(deepcopy=False) if t.number < before]
    finished = {TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL}
    local.add_trials([t if t.state in finished else _placeholder() for t in
                      sorted(earlier, key=lambda t: t.number)])
    for _ in range(before, number):
        local.add_trial(_placeholder())
    trial = local.ask()
    if trial.number != number:  # pragma: no cover - numbering is sequential in memory
        raise RuntimeError(f"frozen copy numbered the trial {trial.number}, not {number}")
    return trial


def _placeholder() -> Any:
    import optuna
    from optuna.trial import TrialState

    return optuna.trial.create_trial(state=TrialState.FAIL)


def trial_env(storage_url: str, study_name: str, trial_id: int, pruner: str | None,
              warmup: int, monitor: str | None, frozen_before: int | None) -> str:
    """The value of ``REPRISE_TRIAL`` (:mod:`reprise.core._report`) that rebuilds this
    trial's reporter in a subprocess."""
    return json.dumps({"factory": "reprise.tune._reporter:from_env", "storage": storage_url,
                       "study": study_name, "trial_id": trial_id, "pruner": pruner,
                       "warmup": warmup, "monitor": monitor, "frozen_before": frozen_before})


def from_env(spec: Mapping[str, Any]) -> TrialReporter:
    """Rebuild a reporter in a process that runs part of a trial (a pipeline worker)."""
    import optuna

    from reprise.tune._storage import open_storage

    study = optuna.load_study(study_name=str(spec["study"]),
                              storage=open_storage(str(spec["storage"])),
                              pruner=make_pruner(spec.get("pruner"),
                                                 warmup=int(spec.get("warmup") or 0)),
                              sampler=optuna.samplers.RandomSampler(0))
    frozen = spec.get("frozen_before")
    return TrialReporter(study, int(spec["trial_id"]), monitor=spec.get("monitor"),
                         frozen_before=frozen,
                         pruner=make_pruner(spec.get("pruner"), warmup=int(spec.get("warmup")
                                                                           or 0))
                         if frozen is not None else None)
