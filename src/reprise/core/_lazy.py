"""Optional dependencies, imported on first use (Optuna's ``_imports.py`` habit)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from reprise.core.errors import MissingExtraError

__all__ = ["lazy_attributes", "require"]


def require(module: str, extra: str | None = None, purpose: str = "") -> ModuleType:
    """Import ``module`` or raise an error that names the extra to install.

    Example:
        >>> require("json").__name__
        'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        what = f" for {purpose}" if purpose else ""
        hint = (
            f"pip install 'reprise-ml[{extra}]'" if extra else f"pip install {module.split('.')[0]}"
        )
        raise MissingExtraError(f"{module} is needed{what} but is not installed; run: {hint}") from exc


def lazy_attributes(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps a public name to the
    private module that defines it, imported on first access and then cached on the
    package, so importing the package itself stays cheap.

    Example:
        >>> getter = lazy_attributes("json", {"dumps": "json"})
        >>> getter("dumps")([1])
        '[1]'
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
