"""Estimators as JSON specs, so that cross-validation folds can be pipeline steps.

A step's inputs must be step outputs, files or JSON-able values, and its cache
key is computed from them. An unfitted scikit-learn estimator is fully
described by its class and ``get_params(deep=False)``, so it becomes::

    {"$estimator": "sklearn.linear_model._logistic.LogisticRegression",
     "params": {"C": 1.0, ...}}

recursively for nested estimators (Pipeline steps, ColumnTransformer parts).
Tuples, dicts with non-string keys, types (``dtype=np.float64``), functions
(``score_func=f_classif``) and small arrays are tagged so they come back as
they were.

Rebuilding imports classes by name, which runs their module's code, so only an
allow-list is imported: ``sklearn.*``, plus (for types and functions used as
parameters) ``numpy.*`` and builtin types, plus whatever ``REPRISE_TRUSTED_TYPES``
names (comma-separated names or ``package.*``, the variable the scikit-learn
materializer reads too). Anything else is refused with the fix: produce the
estimator in a step, where it is stored with skops.
"""

from __future__ import annotations

import builtins
import importlib
import types
from collections.abc import Mapping
from typing import Any

from reprise.core.errors import UserError

__all__ = ["build_estimator", "estimator_spec", "is_spec", "spec_versions"]

_EST, _TUPLE, _DICT, _TYPE, _FUNC, _ARRAY, _FLOAT = (
    "$estimator", "$tuple", "$dict", "$type", "$callable", "$array", "$float")
_TRUST_ENV = "REPRISE_TRUSTED_TYPES"


def _trusted(path: str, *, value: bool = False) -> bool:
    """Whether class/function ``path`` may be imported (``value``: a parameter value)."""
    from reprise.store._ml import _patterns, _trusted_by

    top = path.split(".", 1)[0]
    if top == "sklearn" or (value and top in ("numpy", "builtins")):
        return True
    return _trusted_by(path, _patterns(None))


def _path(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def is_spec(value: Any) -> bool:
    """True for a spec made by :func:`estimator_spec`."""
    return isinstance(value, Mapping) and _EST in value


def estimator_spec(estimator: Any) -> dict[str, Any]:
    """An unfitted estimator (its class and hyperparameters) as JSON.

    Example:
        >>> from sklearn.linear_model import LogisticRegression
        >>> spec = estimator_spec(LogisticRegression(C=0.5))
        >>> spec["params"]["C"], build_estimator(spec).C
        (0.5, 0.5)
    """
    get_params = getattr(estimator, "get_params", None)
    if isinstance(estimator, type) or not callable(get_params):
        raise UserError(f"expected an estimator instance (with get_params), got "
                        f"{estimator!r}.")
    path = _path(type(estimator))
    if not _trusted(path):
        raise UserError(
            f"cross-validation inside a pipeline describes the estimator as JSON and rebuilds it "
            f"by importing its class, which is only done for scikit-learn and trusted types; "
            f"{path} is neither. Set {_TRUST_ENV}={path} (or 'package.*') if you trust it, or "
            "build the estimator in a step and pass that step's output instead.")
    params = get_params(deep=False)
    return {_EST: path, "params": {str(k): _encode(v, f"{path}.{k}")
                                    for k, v in sorted(params.items())}}


def _encode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if callable(getattr(value, "get_params", None)) and not isinstance(value, type):
        return estimator_spec(value)
    if isinstance(value, list):
        return [_encode(v, where) for v in value]
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v, where) for v in value]}
    if isinstance(value, dict):
        return {_DICT: [[_encode(k, where), _encode(v, where)] for k, v in value.items()]}
    if isinstance(value, type):
        return {_TYPE: _path(value)}
    if type(value).__module__ == "numpy":
        return _encode_numpy(value, where)
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType):
        return {_FUNC: _path(value)}
    raise UserError(
        f"parameter {where} is a {type(value).__qualname__}, which cannot be described as "
        "JSON for a pipeline step; use a plain value (e.g. an int for random_state), or build "
        "the estimator in a step and pass that step's output.")


def _encode_numpy(value: Any, where: str) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        return {_ARRAY: value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ufunc):
        return {_FUNC: f"numpy.{value.__name__}"}
    raise UserError(f"parameter {where}: a {type(value).__qualname__} cannot be described as "
                    "JSON; use plain values or build the estimator in a step.")


def build_estimator(spec: Mapping[str, Any]) -> Any:
    """A new, unfitted estimator from :func:`estimator_spec` (allow-listed classes only)."""
    if not is_spec(spec):
        raise UserError(f"not an estimator spec: {spec!r}; make one with estimator_spec().")
    cls = _import(str(spec[_EST]), value=False)
    if not isinstance(cls, type):
        raise UserError(f"{spec[_EST]} is not a class.")
    params = {k: _decode(v) for k, v in (spec.get("params") or {}).items()}
    return cls(**params)


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, Mapping):
        return value
    if _EST in value:
        return build_estimator(value)
    if _TUPLE in value:
        return tuple(_decode(v) for v in value[_TUPLE])
    if _DICT in value:
        return {_decode(k): _decode(v) for k, v in value[_DICT]}
    if _FLOAT in value:  # NaN/inf as canonical JSON writes them
        return float(value[_FLOAT])
    if _ARRAY in value:
        import numpy as np

        return np.asarray(value[_ARRAY], dtype=value["dtype"])
    if _TYPE in value or _FUNC in value:
        return _import(str(value.get(_TYPE) or value.get(_FUNC)), value=True)
    raise UserError(f"cannot read estimator parameter {dict(value)!r}: unknown form.")


def _import(path: str, *, value: bool) -> Any:
    if not _trusted(path, value=value):
        raise UserError(f"refusing to import {path}: only scikit-learn (and numpy types or "
                        f"functions as parameters) are trusted; set {_TRUST_ENV}={path} "
                        "(or 'package.*') if you trust it.")
    if path.startswith("builtins."):
        found = getattr(builtins, path.removeprefix("builtins."), None)
        if not isinstance(found, type):
            raise UserError(f"refusing builtins name {path}: only builtin types are allowed.")
        return found
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    raise UserError(f"cannot import {path}; install the library that defines it.")


def spec_versions(spec: Any) -> dict[str, str]:
    """What the estimator's code is, for cache keys: the version of each distribution
    that defines a class in ``spec`` (scikit-learn always), or for a class from the
    user's own code, the hash of its normalised source."""
    from importlib.metadata import PackageNotFoundError, version

    from reprise.env import distribution_for_module

    out = {"scikit-learn": version("scikit-learn")}
    for path in sorted(_classes(spec)):
        module = path.rsplit(".", 1)[0]
        dist = distribution_for_module(module)
        try:
            if dist is not None:
                out[dist] = version(dist)
                continue
        except PackageNotFoundError:
            pass
        from reprise.pipeline._fingerprint import normalised_source_hash

        out[path] = normalised_source_hash(_import(path, value=False))
    return out


def _classes(value: Any) -> set[str]:
    if isinstance(value, list):
        return set().union(*(_classes(v) for v in value)) if value else set()
    if not isinstance(value, Mapping):
        return set()
    found = {str(value[_EST])} if _EST in value else set()
    return found.union(*(_classes(v) for v in value.values()))
