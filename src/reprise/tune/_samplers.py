"""Optuna samplers by name, seeded; the grid sampler that a tuner (which asks and tells
itself) can stop on.
"""

from __future__ import annotations

from typing import Any

from reprise.tune._space import SearchSpace

SAMPLERS = ("tpe", "random", "grid", "cmaes")


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
