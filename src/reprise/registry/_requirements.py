"""A model package's requirements lock and environment: functions of what it holds.

The lock lists the distributions the model's own code paths import, at their
installed versions: those of every class inside the model and its preprocessing
(scikit-learn, numpy, scipy, torch...), Reprise itself (which reads the package),
and, when the package is built inside a pipeline step, the distributions of that
step's environment scope (what its cache key covers). ``environment.json`` holds
the Python minor version, also part of every cache key. Machine facts (CPU, OS,
environment variables, every other installed distribution) stay on the run's
environment fingerprint, outside the package's bytes: installing an unrelated
distribution changes neither the package nor ``reprise verify``'s verdict.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["package_environment"]

_SCALARS = (str, bytes, int, float, complex, bool, type(None))


def package_environment(model: Any, preprocessing: Any,
                        flavor: str) -> tuple[dict[str, Any], list[str]]:
    """``(environment, requirements)`` for a package of ``model`` (see the module docstring).

    Inside a step, the distributions of the model's classes are declared as the step's
    requirements, so a cached package is only reused while they are still installed at
    these versions.
    """
    from reprise.pipeline._scope import current_scope, module_distributions, require_distributions

    modules = {"reprise", *_object_modules(preprocessing)}
    if flavor == "torch":
        from reprise.registry._build import _classes
        from reprise.store._torch import module_spec

        modules |= {"torch", *(path.partition(":")[0] for path in _classes(module_spec(model)))}
    else:
        modules |= _object_modules(model)
    own = module_distributions(modules)
    require_distributions(own)
    scope = current_scope()
    locked = {**(scope or {}).get("distributions", {}), **own}
    python = (scope or {}).get("python") or "%d.%d" % sys.version_info[:2]
    requirements = sorted(f"{name}=={version}" for name, version in locked.items()
                          if version and version != "unknown")
    return {"python": python}, requirements


def _object_modules(root: Any) -> set[str]:
    """The modules of every type reachable from ``root`` through containers and attributes
    (a fitted scikit-learn estimator: its nested estimators, arrays, dtypes, functions)."""
    modules: set[str] = set()
    for obj in _reachable(root):
        if isinstance(obj, type) or callable(obj) and hasattr(obj, "__module__"):
            module = getattr(obj, "__module__", None)
            if isinstance(module, str):
                modules.add(module)
        modules.add(type(obj).__module__)
    return modules


def _reachable(root: Any) -> Iterator[Any]:
    seen: dict[int, Any] = {}  # holds each object, so that no id is reused during the walk
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen[id(obj)] = obj
        yield obj
        if isinstance(obj, _SCALARS) or isinstance(obj, type):
            continue
        if isinstance(obj, dict):
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
        elif type(obj).__module__ == "numpy" and getattr(obj, "dtype", None) is not None:
            if obj.dtype.hasobject and getattr(obj, "ndim", 0) > 0:
                todo.extend(obj.ravel().tolist())
        elif hasattr(obj, "__dict__"):
            todo.extend(vars(obj).values())
