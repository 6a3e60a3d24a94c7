"""Optional dependencies, imported on first use (Optuna's ``_imports.py`` habit)."""

from __future__ import annotations

import importlib
from types import ModuleType

from reprise.core.errors import MissingExtraError

__all__ = ["require"]


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
