"""``skops.io`` without the two seconds its import costs.

Importing ``skops.io`` builds its default allow-list of scikit-learn estimators with
``sklearn.utils.all_estimators()``, which imports every module of scikit-learn (and,
through scikit-learn's array-API shims, torch): about 2 s of a server's cold start,
spent on estimators the file never names.

Reprise does not rely on that list: :func:`reprise.store._ml._loads_estimator` lists
every type in a file that skops does not trust, applies its own allow-list
(``sklearn``, ``numpy``, ``scipy``, builtin classes, ``collections`` and what the user
trusts), and only then lets skops build the objects, trusting exactly the types it
accepted. So :func:`skops_io` imports ``skops.io`` with ``all_estimators`` answering
nothing, and puts a lazy list in its place: inside :func:`own_policy` (Reprise's loader)
it is empty, so skops reports every scikit-learn type in the file and Reprise's policy
decides; anywhere else (user code calling ``skops.io.load`` in the same process) it is
the full list, computed on first use, so skops behaves exactly as it does unpatched.

Only the modules of the types a file names are imported (skops imports a type when it
builds it). Nothing is ever unpickled, and only types that passed the allow-list are
constructed. If skops' internals differ from what this expects, the list is filled at
once and skops keeps its usual behaviour (slower, never less safe).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any

from reprise.core._lazy import require

__all__ = ["own_policy", "skops_io"]

_OWN_POLICY: ContextVar[bool] = ContextVar("reprise_skops_own_policy", default=False)
_NAMES_ATTR = "SKLEARN_ESTIMATOR_TYPE_NAMES"
_lock = threading.Lock()


@contextlib.contextmanager
def own_policy() -> Iterator[None]:
    """Within this block skops trusts no scikit-learn estimator by default: every one in
    a file is reported by ``get_untrusted_types`` and must be passed as ``trusted``."""
    token = _OWN_POLICY.set(True)
    try:
        yield
    finally:
        _OWN_POLICY.reset(token)


def skops_io() -> ModuleType:
    """``skops.io``, imported without building its estimator list (see the module doc)."""
    loaded = sys.modules.get("skops.io")
    if loaded is not None:
        return loaded
    with _lock:
        loaded = sys.modules.get("skops.io")
        if loaded is not None:
            return loaded
        utils: Any = require("sklearn.utils", purpose="storing scikit-learn estimators")
        real = utils.all_estimators
        utils.all_estimators = _no_estimators
        try:
            module = require("skops.io", purpose="storing scikit-learn estimators")
        finally:
            utils.all_estimators = real
        _install_lazy_names()
        return module


def _no_estimators(*args: Any, **kwargs: Any) -> list[tuple[str, type]]:
    return []


def _install_lazy_names() -> None:
    """Replace the empty list skops built with one :class:`_EstimatorNames` in every skops
    module that holds it; if skops does not hold it where expected, fill it in place."""
    built = getattr(sys.modules.get("skops.io._trusted_types"), _NAMES_ATTR, None)
    if not isinstance(built, list) or built:
        return  # skops built its list some other way: nothing was left out
    if getattr(sys.modules.get("skops.io._general"), _NAMES_ATTR, None) is not built:
        built.extend(_estimator_names())  # unknown layout: skops' usual (slow) behaviour
        return
    lazy = _EstimatorNames()
    for name, module in list(sys.modules.items()):
        if name.startswith("skops.") and getattr(module, _NAMES_ATTR, None) is built:
            setattr(module, _NAMES_ATTR, lazy)


def _estimator_names() -> list[str]:
    """skops' own definition of its default-trusted scikit-learn estimators."""
    from sklearn.utils import all_estimators

    get_type_name = importlib.import_module("skops.io._utils").get_type_name
    names = (get_type_name(cls) for _, cls in all_estimators())
    return [n for n in names if n.startswith("sklearn.")]


class _EstimatorNames(list):  # type: ignore[type-arg]
    """A list that is empty under :func:`own_policy` and otherwise holds skops' default
    estimator names, computed the first time they are needed."""

    def __init__(self) -> None:
        super().__init__()
        self._filled = False
        self._fill_lock = threading.Lock()

    def _items(self) -> list[str]:
        if _OWN_POLICY.get():
            return []
        if not self._filled:
            with self._fill_lock:
                if not self._filled:
                    list.extend(self, _estimator_names())
                    self._filled = True
        return list.__getitem__(self, slice(None))  # type: ignore[no-any-return]

    def __add__(self, other: Any) -> list[str]:  # type: ignore[override]
        return self._items() + list(other)

    def __radd__(self, other: Any) -> list[str]:
        return list(other) + self._items()

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __contains__(self, item: object) -> bool:
        return item in self._items()

    def __getitem__(self, index: Any) -> Any:
        return self._items()[index]

    def __eq__(self, other: object) -> bool:
        return self._items() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._items())
