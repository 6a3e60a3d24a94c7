"""The transitive walk behind :func:`reprise.pipeline._fingerprint.code_fingerprint`.

From a step function it follows every name it uses: the user's functions and classes
by normalised source, module-level constants by value, other module-level objects by
the statement that binds them, third-party code by distribution version. What cannot
be fingerprinted makes the result inexact (a random nonce: the cache never hits).
"""

from __future__ import annotations

import enum
import functools
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Mapping
from typing import Any

from reprise.core._hashing import hash_bytes
from reprise.env import normalise_name
from reprise.pipeline._modkind import (
    _classify,
    _dist_version,
    _dists_for_top,
    _Kind,
    _kind_unimported,
    _module_kind,
    _Roots,
)
from reprise.pipeline._source import (
    _array_repr,
    _constant_repr,
    _ImportSpec,
    _module_source,
    _Source,
    _source_of,
)

_MISSING: Any = object()


# Module attributes that name the module rather than its behaviour; ``__file__``
# would also tie cache keys to the checkout's location.
_SKIP = frozenset({"__builtins__", "__cached__", "__doc__", "__file__", "__loader__",
                   "__name__", "__package__", "__path__", "__spec__"})


class _Walker:
    """One fingerprint's traversal; ``seen`` guards cycles, ``keep`` pins ids."""

    def __init__(self, roots: _Roots) -> None:
        self.roots = roots
        self.functions: dict[str, str] = {}
        self.constants: dict[str, str] = {}
        self.distributions: dict[str, str] = {}
        self.files: set[str] = set()
        self.exact = True
        self._seen: set[int] = set()
        self._keep: list[object] = []
        self._scanned: set[int] = set()
        self._bindings: set[tuple[str, str]] = set()
        # Functions and classes wait here rather than being walked recursively:
        # a depth-first walk of a large codebase would exceed the recursion limit.
        self._pending: list[types.FunctionType | type] = []

    def drain(self) -> None:
        while self._pending:
            self.visit_code(self._pending.pop())

    def mark(self, obj: object) -> bool:
        """Record ``obj`` as visited; False when it already was."""
        if id(obj) in self._seen:
            return False
        self._seen.add(id(obj))
        self._keep.append(obj)
        return True

    def kind(self, module: types.ModuleType) -> _Kind:
        return _module_kind(module, self.roots)

    def add_dists(self, module_name: str) -> None:
        top = module_name.partition(".")[0]
        for dist in _dists_for_top(top) or (normalise_name(top),):
            self.distributions[dist] = _dist_version(dist)

    def visit(self, obj: object, mod: str, name: str, *, in_module: bool = True) -> None:
        """Account for ``obj``, found under ``name`` in module ``mod`` (or a closure)."""
        label = f"{mod}:{name}"
        if isinstance(obj, types.ModuleType):
            self.visit_module(obj)
            return
        if isinstance(obj, enum.Enum):
            cls = type(obj)
            self.constants[label] = hash_bytes(
                f"{cls.__module__}.{cls.__qualname__}.{obj.name}".encode())
            self.visit(cls, mod, name)
            return
        text = _constant_repr(obj)
        if text is not None:
            self.constants[label] = hash_bytes(text.encode())
            return
        if not self.mark(obj):
            return
        if isinstance(obj, (types.FunctionType, type)):
            self._pending.append(obj)
            wrapped = _own_attr(obj, "__wrapped__")
            if wrapped is not None:
                self.visit(wrapped, mod, name, in_module=in_module)
            return
        inner = _own_attr(obj, "__reprise_func__") or _own_attr(obj, "__wrapped__")
        if inner is not None:
            self.visit(inner, mod, name, in_module=in_module)
            return
        if isinstance(obj, (types.BuiltinFunctionType, types.MethodWrapperType)):
            owner = sys.modules.get(_owner_name(obj))
            if owner is not None and self.kind(owner) == "dist":
                self.add_dists(owner.__name__)
            return
        if isinstance(obj, types.MethodType):
            self.visit(obj.__func__, mod, name, in_module=in_module)
            if isinstance(obj.__self__, type):
                self.visit(obj.__self__, mod, name, in_module=in_module)
                return
        elif isinstance(obj, functools.partial):
            self.visit(obj.func, mod, name, in_module=in_module)
            args = _constant_repr((obj.args, obj.keywords))
            if args is not None:
                self.constants[label] = hash_bytes(args.encode())
                return
        self.visit_instance(obj, mod, name, in_module=in_module)

    def visit_instance(self, obj: object, mod: str, name: str, *, in_module: bool) -> None:
        cls = type(obj)
        self.visit(cls, cls.__module__, cls.__qualname__)
        text = _array_repr(obj)
        if text is not None:
            self.constants[f"{mod}:{name}"] = hash_bytes(text.encode())
            return
        if not in_module:
            # A closure's object was made at run time by code we cannot see.
            self.exact = False
            return
        module = sys.modules.get(mod)
        if module is None or self.kind(module) != "user":
            return
        if not self.visit_binding(module, name):
            self.visit_module(module)

    def visit_code(self, obj: types.FunctionType | type, *, root: bool = False) -> None:
        modname, qualname = _code_name(obj)
        module = sys.modules.get(modname)
        kind = "user" if root else self._code_kind(obj, module)
        if kind == "dist":
            self.add_dists(modname)
        if kind != "user":
            return
        src = _source_of(obj)
        key = f"{modname}:{qualname}"
        if src.digest is None:
            self.exact = False
            self.functions[key] = "unavailable"
            return
        self.functions[key] = src.digest
        if src.file:
            self.files.add(src.file)
        if isinstance(obj, types.FunctionType):
            globals_: Mapping[str, Any] = obj.__globals__
            cells = _cells(obj)
        elif module is not None:
            globals_, cells = vars(module), {}
        else:
            self.exact = False
            return
        if module is not None:
            self.scan(module)
        self.resolve(src, globals_, cells, modname, qualname)

    def visit_module(self, module: types.ModuleType) -> None:
        """A user module used as a value, or through a dynamic attribute: all of it."""
        kind = self.kind(module)
        if kind == "dist":
            self.add_dists(module.__name__)
        if kind != "user" or not self.mark(module):
            return
        key = f"{module.__name__}:<module>"
        info = _module_source(module)
        if info is None:
            self.exact = False
            self.functions[key] = "unavailable"
            return
        self.functions[key] = info.whole().digest or ""
        self.files.add(info.path)
        self.scan(module)
        self.resolve(info.whole(), vars(module), {}, module.__name__, "<module>")

    def visit_binding(self, module: types.ModuleType, name: str) -> bool:
        """Hash the module-level statements binding ``name``; False if there are none."""
        if (module.__name__, name) in self._bindings:
            return True
        self._bindings.add((module.__name__, name))
        info = _module_source(module)
        if info is None:
            return False
        redirects, src = info.binding(name)
        if src is None and not redirects:
            return False
        for spec in redirects:
            source = sys.modules.get(_absolute(spec, vars(module)) or "")
            if source is not None and self.kind(source) == "user" and spec[2]:
                if not self.visit_binding(source, spec[2]):
                    self.visit_module(source)
        if src is not None:
            self.functions[f"{module.__name__}:<global {name}>"] = src.digest or ""
            self.files.add(info.path)
            self.scan(module)
            self.resolve(src, vars(module), {}, module.__name__, "<module>")
        return True

    def scan(self, module: types.ModuleType) -> None:
        """Add the distributions a user module imports at module level."""
        if id(module) in self._scanned:
            return
        self._scanned.add(id(module))
        for value in list(vars(module).values()):
            if isinstance(value, types.ModuleType):
                owner: types.ModuleType | None = value
            elif isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
                owner = sys.modules.get(_owner_name(value))
            else:
                continue
            if owner is not None and self.kind(owner) == "dist":
                self.add_dists(owner.__name__)

    def resolve(self, src: _Source, globals_: Mapping[str, Any], cells: Mapping[str, Any],
                mod: str, owner: str) -> None:
        """Visit what every name chain in ``src`` refers to."""
        by_root: dict[str, list[tuple[str, ...]]] = {}
        for chain in src.chains:
            by_root.setdefault(chain[0], []).append(chain)
        for local, spec in src.imports:
            for chain in by_root.get(local, [(local,)]):
                self.follow_import(spec, chain[1:], globals_)
        for root, chains in by_root.items():
            for chain in chains:
                if root in cells:
                    self.follow(cells[root], chain[1:], mod, f"{owner}.<locals>.{root}",
                                in_module=False)
                if root in globals_ and root not in _SKIP:
                    self.follow(globals_[root], chain[1:], mod, root)

    def follow_import(self, spec: _ImportSpec, rest: tuple[str, ...],
                      globals_: Mapping[str, Any]) -> None:
        name = _absolute(spec, globals_)
        module = self.import_module(name) if name is not None else None
        if module is not None:
            chain = (spec[2], *rest) if spec[2] else rest
            self.follow(module, chain, module.__name__, "<module>")

    def follow(self, obj: object, rest: tuple[str, ...], mod: str, name: str, *,
               in_module: bool = True) -> None:
        """Resolve ``obj.a.b...`` statically through the user's modules, then visit."""
        for attr in rest:
            if not isinstance(obj, types.ModuleType) or self.kind(obj) != "user":
                break
            if attr in _SKIP:
                return
            namespace = vars(obj)
            nxt = namespace.get(attr, _MISSING)
            if nxt is _MISSING and "__path__" in namespace:
                nxt = self.import_module(f"{obj.__name__}.{attr}") or _MISSING
            if nxt is _MISSING:
                break  # dynamic attribute: visit_module takes the whole module
            mod, name, in_module = obj.__name__, attr, True
            obj = nxt
        self.visit(obj, mod, name, in_module=in_module)

    def import_module(self, name: str) -> types.ModuleType | None:
        """The module ``name``; third-party ones are recorded, never imported here."""
        found = sys.modules.get(name)
        if found is not None:
            return found
        top = name.partition(".")[0]
        top_module = sys.modules.get(top)
        kind = (self.kind(top_module) if top_module is not None
                else _kind_unimported(top, self.roots))
        if kind == "dist":
            self.add_dists(name)
        if kind != "user":
            return None
        try:
            return importlib.import_module(name)
        except Exception:  # the step would fail the same way; never a cache hit
            self.exact = False
            return None

    def _code_kind(self, obj: types.FunctionType | type,
                   module: types.ModuleType | None) -> _Kind:
        if module is not None:
            return self.kind(module)
        filename = obj.__code__.co_filename if isinstance(obj, types.FunctionType) else ""
        if os.path.isfile(filename):
            return _classify(_code_name(obj)[0], filename, self.roots)
        return "user"  # exec'd code: its missing source makes the fingerprint inexact


def _cells(func: types.FunctionType) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=False):
        try:
            out[name] = cell.cell_contents
        except ValueError:  # an empty cell: not yet assigned
            continue
    return out


def _own_attr(obj: object, name: str) -> Any:
    """``obj.<name>`` from its own ``__dict__``, never through ``__getattr__``."""
    try:
        namespace = object.__getattribute__(obj, "__dict__")
        return namespace.get(name)
    except Exception:
        return None


def _code_name(obj: types.FunctionType | type) -> tuple[str, str]:
    """``(module, qualname)`` where the code was written; functools.wraps copies both
    ``__module__`` and ``__qualname__`` onto wrappers, so functions use their globals and code.
    """
    if isinstance(obj, types.FunctionType):
        module = obj.__globals__.get("__name__")
        qualname = obj.__code__.co_qualname
    else:
        module, qualname = getattr(obj, "__module__", None), obj.__qualname__
    return (module if isinstance(module, str) else "<unknown>"), qualname


def _owner_name(obj: object) -> str:
    name = getattr(obj, "__module__", None)
    if not isinstance(name, str):
        name = type(getattr(obj, "__self__", None)).__module__
    return name


def _unwrap(obj: Any) -> Any:
    for _ in range(100):
        inner = _own_attr(obj, "__reprise_func__") or _own_attr(obj, "__wrapped__")
        if inner is None or inner is obj:
            break
        obj = inner
    return obj


def _absolute(spec: _ImportSpec, globals_: Mapping[str, Any]) -> str | None:
    module, level, _ = spec
    if not level:
        return module
    package = globals_.get("__package__")
    if not package:
        name = str(globals_.get("__name__", ""))
        package = name if "__path__" in globals_ else name.rpartition(".")[0]
    try:
        return importlib.util.resolve_name("." * level + module, str(package))
    except (ImportError, ValueError):
        return None
