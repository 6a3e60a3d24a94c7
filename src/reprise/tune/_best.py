"""``BestParams("study")``: a study's best params as a pipeline input.

Resolved once when a pipeline run starts (like a ``Dataset`` version): the
params' canonical JSON is hashed into the cache key of the steps that take it,
so a study that found better params re-runs exactly those steps. The run
records the trial it used as ``STUDY#TRIAL`` (as ``churn@latest`` is recorded as
``churn@3``), and ``reprise verify`` replays that trial's params even after the
study has found better ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from reprise.core._hashing import hash_value
from reprise.core.errors import UserError

__all__ = ["BestParams"]


class BestParams(Mapping[str, Any]):
    """The best params of a study, read like a dict inside a step.

    Example (in a pipeline file)::

        @reprise.pipeline
        def final(best: BestParams = BestParams("mlp")):
            return train(data, best)          # inside train: best["lr"]
    """

    def __init__(self, study: str, *, params: Mapping[str, Any] | None = None,
                 trial: int | None = None) -> None:
        if not isinstance(study, str) or not study:
            raise UserError(f"BestParams needs a study name; got {study!r}")
        name, sep, number = study.partition("#")
        if sep:  # "study#7": trial 7, pinned
            if not number.isdigit():
                raise UserError(f"BestParams({study!r}): after '#' comes a trial number, e.g. "
                                f"'{name}#3'")
            trial = int(number)
        self.study, self.pinned = name, bool(sep)
        self._params = dict(params) if params is not None else None
        self.trial = trial

    @classmethod
    def from_param(cls, value: str) -> BestParams:
        """``-p best=STUDY`` on the command line."""
        return cls(value)

    @property
    def params(self) -> dict[str, Any]:
        if self._params is None:
            from reprise.tracking._api import open_workspace

            self._load(open_workspace())
        assert self._params is not None
        return self._params

    def _load(self, ws: Any) -> None:
        from optuna.trial import TrialState

        from reprise.tune._summary import load_study

        study = load_study(ws, self.study)
        if self.pinned:
            done = {t.number: t for t in study.get_trials(deepcopy=False,
                                                          states=(TrialState.COMPLETE,))}
            if self.trial not in done:
                raise UserError(f"study {self.study!r} has no complete trial {self.trial}; "
                                f"complete trials: {sorted(done)[:20]}")
            self._params = dict(done[self.trial].params)
            return
        try:
            best = study.best_trial
        except ValueError:
            raise UserError(f"study {self.study!r} has no complete trial yet; tune it first "
                            f"(`reprise tune ... --study {self.study}`)") from None
        self._params, self.trial = dict(best.params), best.number

    def __getitem__(self, key: str) -> Any:
        try:
            return self.params[key]
        except KeyError:
            raise KeyError(f"study {self.study!r} tuned no param {key!r}; it tuned "
                           f"{sorted(self.params)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    def __repr__(self) -> str:
        return f"BestParams({self.study!r}, trial={self.trial}, params={self._params})"

    # -- the pipeline's external-input protocol (see reprise.pipeline._files.is_external) --

    def reprise_input_key(self) -> str:
        return f"study:{self.study}"

    def reprise_resolve(self, workspace: Any) -> dict[str, Any]:
        from reprise.store._materializers import save_object

        self._load(workspace)
        doc = {"study": self.study, "trial": self.trial, "params": self.params}
        art = save_object(workspace.artifacts, doc)
        return {"content_hash": hash_value(doc), "artifact": art.to_dict(),
                "source": f"{self.study}#{self.trial}",
                "rebuild": {"factory": "reprise.tune._best:BestParams.reprise_rebuild",
                            "payload": doc}}

    @classmethod
    def reprise_rebuild(cls, payload: Mapping[str, Any]) -> BestParams:
        return cls(str(payload["study"]), params=payload["params"],
                   trial=payload.get("trial"))
