"""The transitive walk behind :func:`reprise.pipeline._fingerprint.code_fingerprint`.

From a step function it follows every name it uses: the user's functions and classes
by normalised source, module-level constants by value, other module-level objects by
the statement that binds them, third-party code by distribution version. What cannot
be fingerprinted makes the result inexact (a random nonce: the cache never hits).

Every name a piece of code uses is also recorded as an edge, ``(code, name, what it
resolved to)``: two fingerprints then only agree when each name resolves to the same
code or value, not merely when the same code is reachable (swapping two imports'
aliases changes the key). Labels are ``"module:qualname"``; which of them may drop
their module (see :mod:`._fingerprint`) is decided once the walk is complete, from
``pinned``: classes, whole modules, code that looks at its own module, and functions
used as values rather than called.
"""

from __future__ import annotations

import enum
import functools
import importlib
import importlib.util
import os
import re
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reprise.core._hashing import hash_bytes, hash_value
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
    _source_file,
    _source_of,
)

_MISSING: Any = object()

#: What a name resolved to, as text: ``module NAME``, ``=HASH`` for a constant, ``code
#: LABEL`` for a function or class, ``instance of (DESC) ...`` and so on, nested in
#: parentheses. Labels the fingerprint may rename sit between ``\x01`` and ``\x02``.
_Desc = str
_LABELS = re.compile("\x01([^\x02]*)\x02")
_CODE_LABELS = re.compile("code \x01([^\x02]*)\x02")


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
        # the folders the user's modules were imported from (their sys.path entries)
        self.import_paths: set[str] = set()
        # (label of the code, name chain it uses, descriptor of what that resolved to)
        self.edges: set[tuple[str, str, _Desc]] = set()
        self.pinned: set[str] = set()  # labels that keep their module; see the docstring
        self.exact = True
        self._seen: set[int] = set()
        self._keep: list[object] = []
        self._descs: dict[int, _Desc] = {}
        self._filed: set[tuple[str, str]] = set()
        # id -> (value, hash of its constant text or None), for this walk only
        self._values: dict[int, tuple[object, str | None]] = {}
        self._scanned: set[int] = set()
        self._bindings: dict[str, str | None] = {}
        # Functions and classes wait here rather than being walked recursively:
        # a depth-first walk of a large codebase would exceed the recursion limit.
        self._pending: list[types.FunctionType | type] = []

    def start(self, func: object, target: types.FunctionType | type) -> None:
        """Mark the root (``func``, a step or wrapper around ``target``) as visited,
        with the descriptors a recursive reference to it resolves to."""
        desc = _code_desc(":".join(_code_name(target)))
        for obj in (target, func):
            if self.mark(obj):
                self._descs[id(obj)] = desc
            desc = f"{_type_name(func)} of ({desc})"

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

    def visit(self, obj: object, mod: str, name: str, *, in_module: bool = True) -> _Desc:
        """Account for ``obj``, found under ``name`` in module ``mod`` (or a closure);
        returns what it is, for the edge that led here."""
        label = f"{mod}:{name}"
        if isinstance(obj, types.ModuleType):
            self.visit_module(obj)
            return f"module {obj.__name__}"
        if isinstance(obj, enum.Enum):
            cls = type(obj)
            member = hash_bytes(f"{cls.__module__}.{cls.__qualname__}.{obj.name}".encode())
            self.constants[label] = member
            return f"enum {member} ({self.visit(cls, mod, name)})"
        known = self._values.get(id(obj))
        digest: str | None
        if known is not None and known[0] is obj:  # a constant many functions read
            digest = known[1]
        else:
            text = _constant_repr(obj)
            digest = hash_bytes(text.encode()) if text is not None else None
            self._values[id(obj)] = (obj, digest)
        if digest is not None:
            self.constants[label] = digest
            return f"={digest}"
        if not self.mark(obj):
            return self._descs.get(id(obj), "cycle")
        self._descs[id(obj)] = "cycle"  # until known: an object reaching itself
        desc = self._visit_object(obj, mod, name, label, in_module)
        self._descs[id(obj)] = desc
        return desc

    def _visit_object(self, obj: object, mod: str, name: str, label: str,
                      in_module: bool) -> _Desc:
        if isinstance(obj, (types.FunctionType, type)):
            self._pending.append(obj)
            desc = _code_desc(":".join(_code_name(obj)))
            wrapped = _own_attr(obj, "__wrapped__")
            if wrapped is not None:
                desc += f" wrapping ({self.visit(wrapped, mod, name, in_module=in_module)})"
            return desc
        inner = _own_attr(obj, "__reprise_func__") or _own_attr(obj, "__wrapped__")
        if inner is not None:
            return f"{_type_name(obj)} of ({self.visit(inner, mod, name, in_module=in_module)})"
        if isinstance(obj, (types.BuiltinFunctionType, types.MethodWrapperType)):
            owner = sys.modules.get(_owner_name(obj))
            if owner is not None and self.kind(owner) == "dist":
                self.add_dists(owner.__name__)
            return f"builtin {_owner_name(obj)}.{getattr(obj, '__qualname__', '')}"
        if isinstance(obj, types.MethodType):
            func = self.visit(obj.__func__, mod, name, in_module=in_module)
            if isinstance(obj.__self__, type):
                bound = self.visit(obj.__self__, mod, name, in_module=in_module)
            else:
                bound = self.visit_instance(obj, mod, name, in_module=in_module)
            return f"method ({func}) of ({bound})"
        if isinstance(obj, functools.partial):
            func = self.visit(obj.func, mod, name, in_module=in_module)
            args = _constant_repr((obj.args, obj.keywords))
            if args is not None:
                digest = hash_bytes(args.encode())
                self.constants[label] = digest
                return f"partial ({func}) {digest}"
            return f"partial ({func}) ({self.visit_instance(obj, mod, name, in_module=in_module)})"
        return self.visit_instance(obj, mod, name, in_module=in_module)

    def visit_instance(self, obj: object, mod: str, name: str, *, in_module: bool) -> _Desc:
        cls = type(obj)
        of = f"instance of ({self.visit(cls, cls.__module__, cls.__qualname__)})"
        text = _array_repr(obj)
        if text is not None:
            digest = hash_bytes(text.encode())
            self.constants[f"{mod}:{name}"] = digest
            return f"{of} {digest}"
        if not in_module:
            # A closure's object was made at run time by code we cannot see.
            self.exact = False
            return f"{of} unknown"
        module = sys.modules.get(mod)
        if module is None or self.kind(module) != "user":
            return f"{of} {mod}:{name}"
        bound = self.visit_binding(module, name)
        if bound is None:
            self.visit_module(module)
            return f"{of} in (module {module.__name__}) {name}"
        return f"{of} bound {_label(bound)}"

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
        if isinstance(obj, type) or src.identity:
            self.pinned.add(key)
        if src.digest is None:
            self.exact = False
            self.functions[key] = "unavailable"
            return
        self.functions[key] = src.digest
        if src.file:
            self.add_file(src.file, modname)
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
        self.resolve(src, globals_, cells, modname, qualname, key)

    def visit_module(self, module: types.ModuleType) -> None:
        """A user module used as a value, or through a dynamic attribute: all of it."""
        kind = self.kind(module)
        if kind == "dist":
            self.add_dists(module.__name__)
        if kind != "user" or not self.mark(module):
            return
        key = f"{module.__name__}:<module>"
        self.pinned.add(key)
        info = _module_source(module)
        if info is None:
            self.exact = False
            self.functions[key] = "unavailable"
            return
        self.functions[key] = info.whole().digest or ""
        self.add_file(info.path, module.__name__)
        self.scan(module)
        self.resolve(info.whole(), vars(module), {}, module.__name__, "<module>", key)

    def visit_binding(self, module: types.ModuleType, name: str) -> str | None:
        """Hash the module-level statements binding ``name``; their label, or None if
        there are none."""
        key = f"{module.__name__}:<global {name}>"
        if key in self._bindings:
            return self._bindings[key]
        self._bindings[key] = key  # a binding reaching itself
        info = _module_source(module)
        if info is None:
            self._bindings[key] = None
            return None
        redirects, src = info.binding(name)
        if src is None and not redirects:
            self._bindings[key] = None
            return None
        found: list[tuple[str, str]] = []
        for spec in redirects:
            source = sys.modules.get(_absolute(spec, vars(module)) or "")
            if source is not None and self.kind(source) == "user" and spec[2]:
                label = self.visit_binding(source, spec[2])
                if label is None:
                    self.visit_module(source)
                    label = f"{source.__name__}:<module>"
                found.append((spec[2], label))
        if src is None and len(found) == 1:
            self._bindings[key] = found[0][1]  # a plain re-export: the binding it names
            return found[0][1]
        for imported, label in found:  # the statements and imports together bind it
            self.edges.add((key, f"import {imported}", f"binding {_label(label)}"))
        if src is None:
            self.functions[key] = hash_value({"redirects": redirects})
        else:
            if src.identity:
                self.pinned.add(key)
            self.functions[key] = src.digest or ""
            self.add_file(info.path, module.__name__)
            self.scan(module)
            self.resolve(src, vars(module), {}, module.__name__, "<module>", key)
        return self._bindings[key]

    def add_file(self, path: str, modname: str) -> None:
        """Record a user module's file, the ``__init__`` files of the packages it sits in
        (importing it runs them; a snapshot without them would not import the same way)
        and the folder it was imported from."""
        if (path, modname) in self._filed:
            return
        self._filed.add((path, modname))
        self.files.add(path)
        parts = modname.split(".")
        folder = _import_folder(path, parts)
        if folder is not None:
            self.import_paths.add(folder)
        for i in range(1, len(parts)):
            package = sys.modules.get(".".join(parts[:i]))
            if package is None or self.kind(package) != "user":
                continue
            init = _source_file(package)
            if init is not None and init not in self.files:
                self.files.add(init)

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
                mod: str, owner: str, origin: str) -> None:
        """Visit what every name chain in ``src`` refers to; ``origin`` labels the code."""
        by_root = src.by_root
        for local, spec in src.imports:
            for chain, text, as_value in by_root.get(local, [((local,), local, False)]):
                self.follow_import(spec, chain, globals_, (origin, "import " + text, as_value))
        for root, chains in by_root.items():
            in_cells, in_globals = root in cells, root in globals_ and root not in _SKIP
            for chain, text, as_value in chains:
                if in_cells:
                    self.follow(cells[root], chain[1:], mod, f"{owner}.<locals>.{root}",
                                (origin, text, as_value), in_module=False)
                if in_globals:
                    self.follow(globals_[root], chain[1:], mod, root, (origin, text, as_value))

    def follow_import(self, spec: _ImportSpec, chain: tuple[str, ...],
                      globals_: Mapping[str, Any], edge: tuple[str, str, bool]) -> None:
        name = _absolute(spec, globals_)
        module = self.import_module(name) if name is not None else None
        if module is not None:
            rest = (spec[2], *chain[1:]) if spec[2] else chain[1:]
            self.follow(module, rest, module.__name__, "<module>", edge)

    def follow(self, obj: object, rest: tuple[str, ...], mod: str, name: str,
               edge: tuple[str, str, bool], *, in_module: bool = True) -> None:
        """Resolve ``obj.a.b...`` statically through the user's modules, visit what it
        leads to and record ``edge`` (code label, name chain, used as a value) to it."""
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
        desc = self.visit(obj, mod, name, in_module=in_module)
        if edge[2]:  # passed around rather than called: it may be stored by its module's name
            self.pinned.update(_code_labels(desc))
        self.edges.add((edge[0], edge[1], desc))

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


def _type_name(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _import_folder(path: str, parts: list[str]) -> str | None:
    """The folder module ``a.b.c`` was imported from, given its file ``.../a/b/c.py``
    (or ``.../a/b/c/__init__.py``); None when the file does not sit where its name says."""
    if parts[0] == "__main__":
        return None
    file = Path(os.path.abspath(path))
    here = file.parent if file.stem == "__init__" else file.with_suffix("")
    for expected in reversed(parts):
        if here.name != expected:
            return None
        here = here.parent
    return str(here)


def _label(label: str) -> str:
    return f"\x01{label}\x02"


def _code_desc(label: str) -> _Desc:
    return f"code {_label(label)}"


def _code_labels(desc: _Desc) -> list[str]:
    """The labels of the functions and classes a descriptor names, nested ones too."""
    return _CODE_LABELS.findall(desc)


def rename_labels(desc: _Desc, names: Mapping[str, str]) -> _Desc:
    """``desc`` with each label replaced by ``names[label]`` (where it has one)."""
    if desc.startswith("code \x01") and desc.find("\x01", 6) < 0:  # most are one label
        label = desc[6:desc.index("\x02")]
        return f"code {_label(names.get(label, label))}{desc[desc.index(chr(2)) + 1:]}"
    return _LABELS.sub(lambda m: _label(names.get(m[1], m[1])), desc)


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
