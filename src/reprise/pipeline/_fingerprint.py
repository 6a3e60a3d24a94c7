"""Code fingerprints: the user's own code that a step's result depends on.

:func:`code_fingerprint` hashes the step function's normalised syntax tree
(comments, docstrings and formatting vanish; decorators and annotations stay)
and walks, transitively, every name it uses: functions and classes of the
user's own modules (by their normalised source), module-level constants (by
value), other module-level objects (by the statement that binds them), and
third-party code (by the version of the distribution it comes from). The
standard library counts through the python version, which the cache key holds
separately. Every user module the walk reaches adds the distributions it
imports at module level: the step's "environment scope".

What cannot be fingerprinted (no source, as for code made by ``exec`` or typed
into a plain REPL; non-constant objects captured in closures) makes it inexact:
its hash then carries a random nonce, so the step never hits the cache. The
cache fails toward recomputing.

The hash covers what each name resolves to (an edge per name a piece of code
uses), and names code by where it is written only where that matters: a
function's label drops its module (``*:scale`` rather than ``pkg.helpers:scale``),
so moving an unchanged function to another module keeps its key, unless

* it is a class, or a whole module used as a value (an object's class is stored and
  printed by its module's name);
* its source reads its own module: ``__name__``, ``__file__``, ``__package__``,
  ``__spec__``, ``globals()``, ``vars()``, ``eval``/``exec``, ``f.__module__``,
  anything of ``inspect`` or ``sys._getframe`` (see ``_source.IDENTITY_NAMES``);
* some code uses it as a value rather than calling it (``FunctionTransformer(f)``,
  ``map(f, ...)``, a decorator): it may end up stored by its module's name;
* another function of the same name is reached too (the labels must stay apart).

Its names still have to resolve to the same code and values in the new module (a
global that resolves elsewhere, a relative import that reaches another module's
code, changes the key); module-level constants count by value wherever they live.

Parsed sources are cached per object and state of its file (mtime, size), so a
repeat fingerprint only re-resolves names and re-hashes constants.
"""

from __future__ import annotations

import logging
import os
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core._hashing import hash_bytes, hash_value
from reprise.pipeline._modkind import _kind_unimported, _module_kind, _roots
from reprise.pipeline._source import _source_of
from reprise.pipeline._walker import _code_name, _unwrap, _Walker, rename_labels

__all__ = ["CodeFingerprint", "code_fingerprint", "is_user_module", "normalised_source_hash"]
_logger = logging.getLogger(__name__)

_FORMAT = 2  # 2: edges for every name, labels without modules where that is safe


@dataclass(frozen=True)
class CodeFingerprint:
    """What a step's code depends on, and one hash over it.

    Attributes:
        hash: BLAKE3 over the root's name, ``functions``, ``constants``, what each
            name resolved to and ``distributions``, with labels renamed as the module
            docstring says (not ``modules``: moving a checkout keeps keys).
        functions: ``"module:qualname"`` -> hash of the normalised source of
            every user function and class reached, the step included
            (``"module:<module>"`` for a whole module, ``"module:<global X>"``
            for the statement binding a module-level object ``X``).
        constants: ``"module:name"`` -> hash of a referenced constant's value.
        distributions: normalised distribution name -> version.
        modules: absolute paths of the user's source files reached, sorted, with the
            ``__init__`` files of the packages they are in.
        exact: False when some code had no source; ``hash`` is then unique.
        import_paths: the folders those modules were imported from (their
            ``sys.path`` entries), in ``sys.path`` order.
    """

    hash: str
    functions: dict[str, str]
    constants: dict[str, str]
    distributions: dict[str, str]
    modules: list[str]
    exact: bool
    import_paths: list[str] = field(default_factory=list)


def code_fingerprint(func: Callable[..., Any], *,
                     user_roots: Sequence[str | Path] | None = None) -> CodeFingerprint:
    """Fingerprint a step function and the user code it reaches.

    Args:
        func: The function (or a ``Step``, or a wrapper with ``__wrapped__``).
        user_roots: Directories holding the user's code; see :func:`is_user_module`.

    Example:
        >>> from reprise.core._hashing import hash_value
        >>> fp = code_fingerprint(hash_value)
        >>> len(fp.hash), fp.exact
        (64, True)
    """
    walker = _Walker(_roots(user_roots))
    target = _unwrap(func)
    if isinstance(target, (types.FunctionType, type)):
        module, name = _code_name(target)
        walker.start(func, target)
    else:
        if func is not target:  # marked now, the target itself would not be walked
            walker.mark(func)
        module = str(getattr(target, "__module__", None) or "<unknown>")
        name = str(getattr(target, "__qualname__", None) or type(target).__qualname__)
    try:
        if isinstance(target, (types.FunctionType, type)):
            walker.visit_code(target, root=True)
        else:
            walker.visit(target, module, name, in_module=False)
        walker.drain()
    except Exception:  # an object no rule foresaw
        # A fingerprint that is unsure must not let the step hit the cache.
        _logger.warning("could not fingerprint the code of %s:%s; it will not be cached",
                        module, name, exc_info=True)
        walker.exact = False
    payload = _payload(walker, f"{module}:{name}")
    if not walker.exact:
        payload["nonce"] = os.urandom(16).hex()
    return CodeFingerprint(
        hash=hash_value(payload), functions=dict(sorted(walker.functions.items())),
        constants=dict(sorted(walker.constants.items())),
        distributions=dict(sorted(walker.distributions.items())),
        modules=sorted(walker.files), exact=walker.exact,
        import_paths=in_path_order(walker.import_paths))


def _payload(walker: _Walker, root: str) -> dict[str, Any]:
    """What the hash covers, with labels renamed as the module docstring says."""
    names = _canonical(walker.functions, walker.pinned)
    consts = _canonical(walker.constants, set())
    texts: dict[str, str] = {}
    for _, _, desc in walker.edges:
        if desc not in texts:
            texts[desc] = rename_labels(desc, names)
    # One line per edge, hashed as one text: a large project has thousands of edges
    # (hash_value's generic walk over them as a list would take several times longer).
    edges = sorted({f"{names.get(src, src)}\0{name}\0{texts[desc]}"
                    for src, name, desc in walker.edges})
    # The root names which of the closure's functions is the step: is_even and
    # is_odd reach the same two functions, yet are different steps.
    return {"format": _FORMAT, "root": names.get(root, root),
            "functions": {names[k]: v for k, v in walker.functions.items()},
            "constants": {consts[k]: v for k, v in walker.constants.items()},
            "edges": hash_bytes("\n".join(edges).encode()),
            "distributions": walker.distributions}


def _canonical(labels: dict[str, str], pinned: set[str]) -> dict[str, str]:
    """``module:rest`` -> ``*:rest`` where it is not pinned and no other label has that
    ``rest`` (the renaming must stay one-to-one), else the label itself."""
    rests: dict[str, int] = {}
    for label in labels:
        rest = label.partition(":")[2]
        rests[rest] = rests.get(rest, 0) + 1
    out = {}
    for label in labels:
        rest = label.partition(":")[2]
        movable = label not in pinned and rests[rest] == 1
        out[label] = f"*:{rest}" if movable else label
    return out


def in_path_order(folders: Iterable[str]) -> list[str]:
    """``folders`` in the order of ``sys.path`` (the order imports searched them), then
    the ones not on it (reached through an import hook, as editable installs may be)."""
    order = {os.path.realpath(p or "."): i for i, p in reversed(list(enumerate(sys.path)))}
    return sorted(folders, key=lambda f: (order.get(os.path.realpath(f), len(order)), f))


def is_user_module(module: types.ModuleType | str,
                   user_roots: Sequence[str | Path] | None = None) -> bool:
    """True when ``module`` is the user's own code rather than installed code.

    A module is the user's when its file lies outside the standard library,
    the site-packages directories and the interpreter's prefixes, and (when
    ``user_roots`` is given) under one of the roots. ``__main__`` always is;
    ``reprise`` never is (it counts as the ``reprise-ml`` distribution). A
    module outside the roots that no installed distribution provides is the
    user's too, since nothing else would account for its code; so is one of a
    distribution installed from the user's own source (``pip install -e ./lib``
    or ``pip install ./lib``: PEP 610 ``direct_url.json``), whose version does not
    change when that source is edited.

    Example:
        >>> is_user_module("json")
        False
    """
    if isinstance(module, str):
        found = sys.modules.get(module)
        if found is None:
            return _kind_unimported(module, _roots(user_roots)) == "user"
        module = found
    return _module_kind(module, _roots(user_roots)) == "user"


def normalised_source_hash(obj: Any) -> str:
    """BLAKE3 of the normalised syntax tree of a function or class.

    Raises:
        TypeError: ``obj`` is not a function or class.
        OSError: its source cannot be read.

    Example:
        >>> len(normalised_source_hash(normalised_source_hash))
        64
    """
    target = _unwrap(obj)
    if not isinstance(target, (types.FunctionType, type)):
        raise TypeError(f"expected a function or class, got {type(obj).__qualname__}.")
    digest = _source_of(target).digest
    if digest is None:
        raise OSError(f"no source for {target.__qualname__!r}: it was not defined in a file.")
    return digest


# -- the walk ---------------------------------------------------------------------------


# -- sources ----------------------------------------------------------------------------


# -- values -----------------------------------------------------------------------------


# -- module kinds and distributions -----------------------------------------------------


