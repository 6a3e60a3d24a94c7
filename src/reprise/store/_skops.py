"""``skops.io`` without the seconds its import costs.

Importing ``skops.io`` builds its default allow-lists at import time
(``skops/io/_trusted_types.py``): every scikit-learn estimator, found with
``sklearn.utils.all_estimators()``, which imports every module of scikit-learn (and,
through scikit-learn's array-API shims, torch); the internal types of gradient
boosting (importing ``sklearn.ensemble``); and every numpy and scipy ufunc, each
located by scanning every loaded module. About 2.5 s of a server's cold start, spent on
types the file never names.

Reprise does not rely on those lists: :func:`reprise.store._ml._loads_estimator` lists
every type in a file that skops does not trust, applies its own allow-list
(``sklearn``, ``numpy``, ``scipy``, builtin classes, ``collections`` and what the user
trusts), and only then lets skops build the objects, trusting exactly the types it
accepted. So :func:`skops_io` runs skops' module with those three computations
answering nothing, and puts a lazy list in place of each list they built: inside
:func:`own_policy` (Reprise's loader) it is empty, so skops reports every such type in
a file and Reprise's policy decides; anywhere else (user code calling
``skops.io.load`` in the same process) it holds what skops' own, unpatched module
computes, run the first time it is needed, so skops behaves as it always does.

Only the modules of the types a file names are imported (skops imports a type when it
builds it). Nothing is unpickled, and only types that passed the allow-list are
constructed. If skops' layout differs from what this expects, the lists are filled at
once and skops keeps its usual behaviour (slower, never less safe).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from types import ModuleType
from typing import Any

from reprise.core._lazy import require

__all__ = ["own_policy", "skops_io"]

_OWN_POLICY: ContextVar[bool] = ContextVar("reprise_skops_own_policy", default=False)
_TRUSTED = "skops.io._trusted_types"
_DEFERRED = ("SKLEARN_ESTIMATOR_TYPE_NAMES", "SKLEARN_INTERNAL_TYPE_NAMES",
             "SCIPY_UFUNC_TYPE_NAMES", "NUMPY_UFUNC_TYPE_NAMES")
_BOOSTING = "sklearn.ensemble._hist_gradient_boosting.binning"
_lock = threading.Lock()
_full_lock = threading.Lock()


@contextlib.contextmanager
def own_policy() -> Iterator[None]:
    """Within this block skops trusts no estimator, boosting internal or ufunc by
    default: ``get_untrusted_types`` reports every one in a file, and ``loads`` must be
    given them as ``trusted``."""
    token = _OWN_POLICY.set(True)
    try:
        yield
    finally:
        _OWN_POLICY.reset(token)


def skops_io() -> ModuleType:
    """``skops.io``, imported without building its default allow-lists (module doc)."""
    loaded = sys.modules.get("skops.io")
    if loaded is not None:
        return loaded
    with _lock:
        loaded = sys.modules.get("skops.io")
        if loaded is not None:
            return loaded
        require("sklearn.utils", purpose="storing scikit-learn estimators")
        finder = _Finder()
        sys.meta_path.insert(0, finder)
        try:
            module = require("skops.io", purpose="storing scikit-learn estimators")
        finally:
            sys.meta_path.remove(finder)
        if finder.ran:
            _install_lazy_lists()
        return module


class _Finder(importlib.abc.MetaPathFinder):
    """Gives skops' ``_trusted_types`` a loader that runs it with the slow parts off."""

    def __init__(self) -> None:
        self.ran = False

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TRUSTED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _FastLoader(spec.loader, self)
        return spec


class _FastLoader(importlib.abc.Loader):
    def __init__(self, real: Any, finder: _Finder) -> None:
        self.real, self.finder = real, finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        utils: Any = importlib.import_module("skops.io._utils")
        sk_utils: Any = sys.modules["sklearn.utils"]
        block = _BOOSTING not in sys.modules  # its import raises ImportError: skipped
        real_names, real_estimators = utils.get_public_type_names, sk_utils.all_estimators
        utils.get_public_type_names = lambda *a, **k: []
        sk_utils.all_estimators = lambda *a, **k: []
        if block:
            sys.modules[_BOOSTING] = None  # type: ignore[assignment]
        try:
            self.real.exec_module(module)
        finally:
            utils.get_public_type_names, sk_utils.all_estimators = real_names, real_estimators
            if block:
                sys.modules.pop(_BOOSTING, None)
        self.finder.ran = True


def _install_lazy_lists() -> None:
    """Put a :class:`_LazyNames` wherever a skops module holds a list the fast run left
    short; a list held where this does not expect it is filled in place instead."""
    fast = sys.modules[_TRUSTED]
    for attr in _DEFERRED:
        short = getattr(fast, attr, None)
        if not isinstance(short, list):
            continue
        holders = [m for n, m in list(sys.modules.items())
                   if n.startswith("skops.") and getattr(m, attr, None) is short]
        if "skops.io._general" not in {m.__name__ for m in holders}:
            short[:] = getattr(_full_lists(), attr)  # unknown layout: skops' own values
            continue
        lazy = _LazyNames(attr)
        for holder in holders:
            setattr(holder, attr, lazy)


_full: ModuleType | None = None


def _full_lists() -> ModuleType:
    """A private copy of skops' ``_trusted_types`` run unpatched: its lists are exactly
    what ``import skops.io`` computes (the slow part, run only when asked for)."""
    global _full
    with _full_lock:
        if _full is None:
            package: Any = sys.modules["skops.io"]  # (find_spec would reuse the fast spec)
            spec = importlib.machinery.PathFinder.find_spec(_TRUSTED, package.__path__)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot find {_TRUSTED}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _full = module
    return _full


class _LazyNames(list):  # type: ignore[type-arg]
    """One of skops' default allow-lists: empty under :func:`own_policy`, otherwise the
    list skops computes, the first time it is needed."""

    def __init__(self, attr: str) -> None:
        super().__init__()
        self._attr = attr

    def _items(self) -> list[str]:
        if _OWN_POLICY.get():
            return []
        return list(getattr(_full_lists(), self._attr))

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
