"""Loading ``FILE.py:PIPELINE`` (or ``package.module:PIPELINE``) from the command line."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from reprise.core.errors import UserError
from reprise.pipeline._pipeline import Pipeline

__all__ = ["load_pipeline"]


def load_pipeline(ref: str, *, base: Path | None = None) -> Pipeline:
    """The pipeline object named by ``ref``; the file's folder goes on ``sys.path``
    so its sibling modules import as they would under ``python FILE.py``."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr:
        raise UserError(f"pipeline reference {ref!r} must look like FILE.py:PIPELINE or "
                        "package.module:PIPELINE.")
    if target.endswith(".py") or "/" in target:
        path = (base or Path.cwd()) / target
        if not path.is_file():
            raise UserError(f"no pipeline file {str(path)!r}; check the path in {ref!r}.")
        folder = str(path.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = path.stem
        existing = sys.modules.get(name)
        if existing is not None and Path(getattr(existing, "__file__", "") or "").resolve() \
                != path.resolve():
            raise UserError(f"module name {name!r} of {str(path)!r} clashes with an imported "
                            "module; rename the file.")
        if existing is None:
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise UserError(f"cannot load {str(path)!r} as a Python module.")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
        mod = sys.modules[name]
    else:
        try:
            mod = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise UserError(f"cannot import module {target!r} ({exc}); check {ref!r}.") from None
    obj = getattr(mod, attr, None)
    if obj is None:
        found = sorted(k for k, v in vars(mod).items() if isinstance(v, Pipeline))
        raise UserError(f"{target} has no pipeline {attr!r}; pipelines there: {found or 'none'}.")
    if not isinstance(obj, Pipeline):
        raise UserError(f"{ref} is a {type(obj).__name__}, not a @pipeline.")
    return obj
