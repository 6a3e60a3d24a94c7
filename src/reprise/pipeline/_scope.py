"""A step's environment scope: the part of the environment its cache key covers.

The scope is the Python minor version and the versions of the third-party
distributions the step's code reaches (see :mod:`._fingerprint`). Whatever a
step stores must depend on the environment only through its scope, or a cache
hit (and ``reprise verify``) would compare bytes that describe another machine.

Some dependencies are only known once the step has run: the classes inside the
model it returns. The step declares them with :func:`require_distributions`;
they are recorded with the cache entry, and the entry is only reused while each
of them is still installed at the recorded version (the cache fails toward
recomputing).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from reprise.env import distribution_for_module

__all__ = ["changed_requirements", "current_scope", "module_distributions",
           "require_distributions", "step_scope"]


def step_scope(distributions: Mapping[str, str]) -> dict[str, Any]:
    """The environment part of a cache key: Python minor and ``distributions`` sorted.

    Example:
        >>> sorted(step_scope({"numpy": "2.1.0"}))
        ['distributions', 'python']
    """
    return {"python": "%d.%d" % sys.version_info[:2],
            "distributions": dict(sorted(distributions.items()))}


def module_distributions(modules: Iterable[str]) -> dict[str, str]:
    """Installed distribution -> version for the distributions providing ``modules``.

    The standard library and modules of no installed distribution drop out.

    Example:
        >>> list(module_distributions(["numpy.linalg", "os"]))
        ['numpy']
    """
    from reprise.pipeline._modkind import _dist_version

    found: dict[str, str] = {}
    for module in set(modules):
        dist = distribution_for_module(module)
        if dist is not None:
            found[dist] = _dist_version(dist)
    return dict(sorted(found.items()))


def _current_step() -> Any:
    from reprise.pipeline._execute import StepContext
    from reprise.tracking._api import _active

    top = _active.top()
    return top if isinstance(top, StepContext) else None


def current_scope() -> dict[str, Any] | None:
    """The scope of the step executing in this process, or None outside a step."""
    ctx = _current_step()
    return dict(ctx.scope) if ctx is not None and ctx.scope is not None else None


def require_distributions(distributions: Mapping[str, str]) -> None:
    """Declare that the executing step's outputs depend on these distribution versions
    (see the module docstring); nothing happens outside a step."""
    ctx = _current_step()
    if ctx is not None:
        ctx.requires.update(distributions)


def changed_requirements(requires: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``{name: (recorded, installed)}`` for each declared requirement that changed."""
    from reprise.pipeline._modkind import _dist_version

    return {name: (version, _dist_version(name)) for name, version in sorted(requires.items())
            if _dist_version(name) != version}
