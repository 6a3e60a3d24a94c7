"""Which modules are the user's own, a third-party distribution's or the standard
library's, and the distributions (with versions) that a top-level module comes from.

A fingerprint walks into the user's modules, counts distributions by version and the
standard library by the python version; classification is cached per module and roots.

A distribution installed from the user's own source (PEP 610 ``direct_url.json``: a
local folder, editable or not, or any ``file://`` URL; ``pip install -e ./mylib``) is
the user's code too: its version does not change when its source is edited, so it is
fingerprinted by its source like the project's modules.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import site
import sys
import sysconfig
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from reprise.env import distribution_for_module

_Kind = Literal["user", "dist", "stdlib"]
_Roots = tuple[str, ...]


_KINDS: dict[tuple[str, str | None, _Roots], _Kind] = {}


def _roots(user_roots: Sequence[str | Path] | None) -> _Roots:
    return tuple(os.path.realpath(os.fspath(r)) for r in user_roots or ())


def _module_kind(module: types.ModuleType, roots: _Roots) -> _Kind:
    namespace = vars(module)
    path = namespace.get("__file__")
    if not isinstance(path, str):
        locations = namespace.get("__path__")
        path = next(iter(locations), None) if locations is not None else None
    key = (module.__name__, path, roots)
    kind = _KINDS.get(key)
    if kind is None:
        kind = _KINDS[key] = _classify(module.__name__, path, roots)
    return kind


def _kind_unimported(name: str, roots: _Roots) -> _Kind:
    top = name.partition(".")[0]
    if top in sys.stdlib_module_names:
        return "stdlib"
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return "stdlib"  # not importable: nothing to account for
    locations = list(spec.submodule_search_locations or ())
    path = spec.origin if spec.has_location else (locations[0] if locations else None)
    return _classify(top, path, roots)


def _classify(name: str, path: str | None, roots: _Roots) -> _Kind:
    kind = _classify_location(name, path, roots)
    top = name.partition(".")[0]
    if kind == "dist" and top != "reprise" and any(
            _from_local_source(d) for d in _dists_for_top(top)):
        return "user"
    return kind


def _classify_location(name: str, path: str | None, roots: _Roots) -> _Kind:
    top = name.partition(".")[0]
    if name == "__main__":
        return "user"
    if top == "reprise":
        return "dist"
    stdlib = top in sys.stdlib_module_names or top in sys.builtin_module_names
    if path is None:
        if stdlib:
            return "stdlib"
        return "dist" if _dists_for_top(top) else "user"
    real = os.path.realpath(path)
    site_dirs, stdlib_dirs, prefixes = _env_dirs()
    if _under(real, site_dirs):
        return "dist"
    if _under(real, stdlib_dirs):
        return "stdlib" if stdlib else "dist"
    if _under(real, roots) or (not roots and not _under(real, prefixes)):
        return "user"
    if stdlib and _under(real, prefixes):
        return "stdlib"
    return "dist" if _dists_for_top(top) else "user"


def _under(path: str, dirs: Iterable[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


@functools.cache
def _env_dirs() -> tuple[_Roots, _Roots, _Roots]:
    paths = sysconfig.get_paths()
    site_dirs = {paths["purelib"], paths["platlib"], site.getusersitepackages()}
    try:
        site_dirs.update(site.getsitepackages())
    except AttributeError:  # old virtualenv's site module
        pass
    stdlib_dirs = {paths["stdlib"], paths["platstdlib"]}
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}

    def norm(dirs: set[str]) -> _Roots:
        return tuple(sorted({os.path.realpath(d) for d in dirs if d} - {os.sep}))

    return norm(site_dirs), norm(stdlib_dirs), norm(prefixes)


def _dists_for_top(top: str) -> tuple[str, ...]:
    """Normalised names of the distributions providing top-level package ``top``."""
    dist = distribution_for_module(top)
    return (dist,) if dist is not None else ()


@functools.cache
def _from_local_source(name: str) -> bool:
    """Whether distribution ``name`` was installed from a local folder or file (PEP 610)."""
    from importlib import metadata

    try:
        text = metadata.distribution(name).read_text("direct_url.json")
    except (metadata.PackageNotFoundError, ValueError):
        return False
    try:
        doc = json.loads(text or "null")
    except ValueError:
        return False
    if not isinstance(doc, dict):
        return False
    url = doc.get("url")
    return isinstance(doc.get("dir_info"), dict) or (
        isinstance(url, str) and url.lower().startswith("file:"))


@functools.cache
def _dist_version(name: str) -> str:
    """The installed version of distribution ``name``, or ``"unknown"``."""
    from importlib import metadata

    try:
        dist = metadata.distribution(name)
    except (metadata.PackageNotFoundError, ValueError):
        return "unknown"
    # The header lines by hand: the email parser behind ``dist.version`` is slower.
    for line in (dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "").splitlines():
        if not line:
            break
        if line.startswith("Version:"):
            return line[8:].strip()
    return str(dist.version or "unknown")
