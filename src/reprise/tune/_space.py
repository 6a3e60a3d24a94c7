"""Search spaces: a declarative dict (or YAML file) turned into Optuna distributions.

A space maps each parameter to one of::

    lr:        {type: float, low: 1.0e-4, high: 0.1, log: true}
    layers:    {type: int, low: 1, high: 4}
    units:     {type: int, low: 16, high: 256, step: 16}
    optimizer: {type: categorical, choices: [adam, sgd]}
    dropout:   [0.0, 0.1, 0.3]                 # a list is shorthand for categorical
    C:         {low: 0.01, high: 10, log: true} # no type: float, or int if both bounds are
    units:     {low: 8, high: 128, log: true}    # int bounds: an int range, log-scaled

Declared up front (rather than define-by-run) so that a study's space can be
recorded, compared on resume, turned into a grid, and sampled by the
coordinator with ``study.ask(distributions)`` while the objective runs in
another process. Everything wrong is a ``UserError`` naming the parameter.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reprise.core.errors import UserError

__all__ = ["SearchSpace", "load_space"]

_TYPES = ("float", "int", "categorical")
_KEYS = {"type", "low", "high", "log", "step", "choices", "grid"}
_SCALARS = (type(None), bool, int, float, str)


class SearchSpace:
    """A validated search space: ``distributions()`` for Optuna, ``spec`` as plain data."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        if not isinstance(spec, Mapping) or not spec:
            raise UserError("the search space must be a non-empty mapping of parameter names "
                            f"to ranges or choices; got {spec!r}")
        self.spec: dict[str, dict[str, Any]] = {}
        for name, entry in spec.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise UserError(f"search space: parameter name {name!r} must be an identifier "
                                "(it becomes a keyword argument)")
            self.spec[name] = _normalise(name, entry)

    def distributions(self) -> dict[str, Any]:
        """``{name: optuna.distributions.BaseDistribution}``."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        out: dict[str, Any] = {}
        for name, e in self.spec.items():
            if e["type"] == "categorical":
                out[name] = CategoricalDistribution(e["choices"])
            elif e["type"] == "int":
                out[name] = IntDistribution(e["low"], e["high"], log=e["log"],
                                            step=e.get("step") or 1)
            else:
                out[name] = FloatDistribution(e["low"], e["high"], log=e["log"],
                                              step=e.get("step"))
        return out

    def grid(self) -> dict[str, list[Any]]:
        """The values a grid search tries per parameter.

        Categorical choices, ``grid:`` lists, and int or stepped float ranges
        with at most 1,000 points; a continuous float range needs ``grid:``.
        """
        out: dict[str, list[Any]] = {}
        for name, e in self.spec.items():
            if "grid" in e:
                out[name] = list(e["grid"])
            elif e["type"] == "categorical":
                out[name] = list(e["choices"])
            elif e["type"] == "int" or e.get("step"):
                step = e.get("step") or 1
                count = int(round((e["high"] - e["low"]) / step)) + 1
                if count > 1000:
                    raise UserError(f"search space: {name!r} has {count} grid points; give it "
                                    "a grid: [values] list or a larger step for a grid search")
                out[name] = [e["low"] + i * step for i in range(count)]
            else:
                raise UserError(f"search space: {name!r} is a continuous float range; a grid "
                                f"search needs its values: add grid: [..] to {name!r}")
        return out

    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.grid().values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SearchSpace) and other.spec == self.spec

    def __repr__(self) -> str:
        return f"SearchSpace({self.spec!r})"


def _normalise(name: str, entry: Any) -> dict[str, Any]:
    if isinstance(entry, list | tuple):
        entry = {"type": "categorical", "choices": list(entry)}
    if not isinstance(entry, Mapping):
        raise UserError(f"search space: {name!r} must be a list of choices or a mapping with "
                        f"low/high or choices; got {entry!r}")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise UserError(f"search space: {name!r} has unknown key(s) {unknown}; use "
                        f"{sorted(_KEYS)}")
    kind = entry.get("type") or ("categorical" if "choices" in entry else _infer(entry))
    if kind not in _TYPES:
        raise UserError(f"search space: {name!r} has type {kind!r}; use one of {list(_TYPES)}")
    if kind == "categorical":
        return _categorical(name, entry)
    return _numeric(name, kind, entry)


def _infer(entry: Mapping[str, Any]) -> str:
    """Integer bounds give an int range (log-scaled too); any float bound a float range."""
    bounds = (entry.get("low"), entry.get("high"))
    ints = all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
    return "int" if ints else "float"


def _categorical(name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    choices = entry.get("choices")
    if not isinstance(choices, list | tuple) or not choices:
        raise UserError(f"search space: {name!r} needs a non-empty list of choices")
    bad = [c for c in choices if not isinstance(c, _SCALARS)]
    if bad:
        raise UserError(f"search space: choices of {name!r} must be None, booleans, numbers "
                        f"or strings; got {bad[0]!r}")
    if len(set(map(repr, choices))) != len(choices):
        raise UserError(f"search space: {name!r} lists a choice twice: {list(choices)}")
    extra = sorted(set(entry) - {"type", "choices"})
    if extra:
        raise UserError(f"search space: categorical {name!r} takes only choices, not {extra}")
    return {"type": "categorical", "choices": list(choices)}


def _numeric(name: str, kind: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    low, high = entry.get("low"), entry.get("high")
    for label, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise UserError(f"search space: {name!r} needs a finite number for {label}; got "
                            f"{v!r}")
    assert isinstance(low, int | float) and isinstance(high, int | float)
    if kind == "int" and not (float(low).is_integer() and float(high).is_integer()):
        raise UserError(f"search space: int {name!r} needs integer bounds; got {low}..{high}")
    if not low < high:
        raise UserError(f"search space: {name!r} needs low < high; got low={low}, high={high}")
    log = entry.get("log", False)
    if not isinstance(log, bool):
        raise UserError(f"search space: {name!r} log must be true or false; got {log!r}")
    if log and low <= 0:
        raise UserError(f"search space: {name!r} is log-scaled, so low must be > 0; got {low}")
    step = entry.get("step")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int | float) or step <= 0:
            raise UserError(f"search space: {name!r} step must be a positive number; got "
                            f"{step!r}")
        if log:
            raise UserError(f"search space: {name!r} cannot have both log and step")
        if kind == "int" and not float(step).is_integer():
            raise UserError(f"search space: int {name!r} needs an integer step; got {step}")
    out: dict[str, Any] = {"type": kind, "low": int(low) if kind == "int" else float(low),
                           "high": int(high) if kind == "int" else float(high), "log": log}
    if step is not None:
        out["step"] = int(step) if kind == "int" else float(step)
    if "grid" in entry:
        grid = entry["grid"]
        if not isinstance(grid, list | tuple) or not grid or any(
                isinstance(g, bool) or not isinstance(g, int | float) or not low <= g <= high
                for g in grid):
            raise UserError(f"search space: grid of {name!r} must list numbers within "
                            f"[{low}, {high}]; got {grid!r}")
        out["grid"] = [int(g) if kind == "int" else float(g) for g in grid]
    return out


def load_space(space: SearchSpace | Mapping[str, Any] | str | os.PathLike[str]) -> SearchSpace:
    """A :class:`SearchSpace` from a mapping, or a YAML or JSON file.

    Example:
        >>> load_space({"lr": {"low": 1e-4, "high": 1e-1, "log": True}, "act": ["relu", "tanh"]}
        ...            ).spec["act"]
        {'type': 'categorical', 'choices': ['relu', 'tanh']}
    """
    if isinstance(space, SearchSpace):
        return space
    if isinstance(space, str | os.PathLike):
        path = Path(space)
        if not path.is_file():
            raise UserError(f"search space file {str(path)!r} does not exist")
        import yaml

        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise UserError(f"search space file {str(path)!r} is not valid YAML: {exc}") from None
        return SearchSpace(loaded)
    return SearchSpace(space)
