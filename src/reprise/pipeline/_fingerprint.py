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

Parsed sources are cached per object and state of its file (mtime, size), so a
repeat fingerprint only re-resolves names and re-hashes constants.
"""

from __future__ import annotations

import ast
import enum
import functools
import importlib
import importlib.util
import inspect
import linecache
import logging
import os
import site
import sys
import sysconfig
import textwrap
import types
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from reprise.core._hashing import hash_bytes, hash_value
from reprise.env import distribution_for_module, normalise_name

__all__ = ["CodeFingerprint", "code_fingerprint", "is_user_module", "normalised_source_hash"]

_Kind = Literal["user", "dist", "stdlib"]
_ImportSpec = tuple[str, int, "str | None"]  # (module, relative level, first attribute)
_Roots = tuple[str, ...]

_logger = logging.getLogger(__name__)

_FORMAT = 1
_MISSING: Any = object()
# Module attributes that name the module rather than its behaviour; ``__file__``
# would also tie cache keys to the checkout's location.
_SKIP = frozenset({"__builtins__", "__cached__", "__doc__", "__file__", "__loader__",
                   "__name__", "__package__", "__path__", "__spec__"})
_SCALARS = (type(None), bool, int, float, complex, str, bytes)


@dataclass(frozen=True)
class CodeFingerprint:
    """What a step's code depends on, and one hash over it.

    Attributes:
        hash: BLAKE3 over the root's name, ``functions``, ``constants`` and
            ``distributions`` (not ``modules``: moving a checkout keeps keys).
        functions: ``"module:qualname"`` -> hash of the normalised source of
            every user function and class reached, the step included
            (``"module:<module>"`` for a whole module, ``"module:<global X>"``
            for the statement binding a module-level object ``X``).
        constants: ``"module:name"`` -> hash of a referenced constant's value.
        distributions: normalised distribution name -> version.
        modules: absolute paths of the user's source files reached, sorted.
        exact: False when some code had no source; ``hash`` is then unique.
    """

    hash: str
    functions: dict[str, str]
    constants: dict[str, str]
    distributions: dict[str, str]
    modules: list[str]
    exact: bool


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
    walker.mark(func)
    if isinstance(target, (types.FunctionType, type)):
        module, name = _code_name(target)
    else:
        module = str(getattr(target, "__module__", None) or "<unknown>")
        name = str(getattr(target, "__qualname__", None) or type(target).__qualname__)
    try:
        if isinstance(target, (types.FunctionType, type)):
            walker.mark(target)
            walker.visit_code(target, root=True)
        else:
            walker.visit(target, module, name, in_module=False)
        walker.drain()
    except Exception:  # an object no rule foresaw
        # A fingerprint that is unsure must not let the step hit the cache.
        _logger.warning("could not fingerprint the code of %s:%s; it will not be cached",
                        module, name, exc_info=True)
        walker.exact = False
    # The root names which of the closure's functions is the step: is_even and
    # is_odd reach the same two functions, yet are different steps.
    payload: dict[str, Any] = {
        "format": _FORMAT, "root": f"{module}:{name}", "functions": walker.functions,
        "constants": walker.constants, "distributions": walker.distributions}
    if not walker.exact:
        payload["nonce"] = os.urandom(16).hex()
    return CodeFingerprint(
        hash=hash_value(payload), functions=dict(sorted(walker.functions.items())),
        constants=dict(sorted(walker.constants.items())),
        distributions=dict(sorted(walker.distributions.items())),
        modules=sorted(walker.files), exact=walker.exact)


def is_user_module(module: types.ModuleType | str,
                   user_roots: Sequence[str | Path] | None = None) -> bool:
    """True when ``module`` is the user's own code rather than installed code.

    A module is the user's when its file lies outside the standard library,
    the site-packages directories and the interpreter's prefixes, and (when
    ``user_roots`` is given) under one of the roots. ``__main__`` always is;
    ``reprise`` never is (it counts as the ``reprise-ml`` distribution). A
    module outside the roots that no installed distribution provides is the
    user's too, since nothing else would account for its code.

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


# -- sources ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """A normalised source: its hash, the name chains it uses, its local imports."""

    digest: str | None
    chains: tuple[tuple[str, ...], ...] = ()
    imports: tuple[tuple[str, _ImportSpec], ...] = ()
    file: str | None = None


_SOURCES: dict[int, tuple[weakref.ref[Any], tuple[Any, ...], _Source]] = {}
_MODULES: dict[str, tuple[tuple[int, int], _ModuleSource]] = {}


def _source_of(obj: types.FunctionType | type) -> _Source:
    """The normalised source of a function or class, cached per object and file state."""
    filename: str | None
    if isinstance(obj, types.FunctionType):
        filename = obj.__code__.co_filename
        stamp: tuple[Any, ...] = (id(obj.__code__), filename, *_stat(filename))
    else:
        module = sys.modules.get(obj.__module__)
        filename = _source_file(module) if module is not None else None
        stamp = (filename, *_stat(filename))
    hit = _SOURCES.get(id(obj))
    if hit is not None and hit[0]() is obj and hit[1] == stamp:
        return hit[2]
    src = _read_source(obj, filename)
    try:
        key = id(obj)
        _SOURCES[key] = (weakref.ref(obj, lambda _: _SOURCES.pop(key, None)), stamp, src)
    except TypeError:
        pass
    return src


def _read_source(obj: types.FunctionType | type, filename: str | None) -> _Source:
    file = os.path.abspath(filename) if filename and os.path.isfile(filename) else None
    try:
        text = _function_text(obj) if isinstance(obj, types.FunctionType) else inspect.getsource(obj)
    except Exception:  # OSError, TypeError, tokenizer errors: no usable source
        return _Source(None, file=file)
    # ``co_name`` is the name in the source even where functools.wraps renamed the function.
    name = obj.__code__.co_name if isinstance(obj, types.FunctionType) else obj.__name__
    tree = _parse(text)
    if tree is not None and (name == "<lambda>" or _defines(tree, name)):
        return _normalise_tree(tree, file)
    if isinstance(obj, types.FunctionType) and name == "<lambda>":
        names = _code_names(obj.__code__)
        return _Source(_code_digest(obj.__code__), tuple((n,) for n in names), file=file)
    return _Source(None, file=file)


def _function_text(func: types.FunctionType) -> str:
    """The source block at the function's first line.

    ``inspect.getsource`` would follow ``__wrapped__`` (a wrapper would read as the
    function it wraps), and on a code object it scans every loaded module once.
    """
    code = func.__code__
    linecache.checkcache(code.co_filename)
    lines = linecache.getlines(code.co_filename, func.__globals__)
    start = code.co_firstlineno - 1
    if not 0 <= start < len(lines):
        raise OSError(f"no source lines for {code.co_qualname}")
    return "".join(inspect.getblock(lines[start:]))


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(textwrap.dedent(text))
    except SyntaxError:
        pass
    if text[:1] in (" ", "\t"):
        # Indented source whose strings reach column 0 cannot be dedented; nest it instead.
        try:
            body = ast.parse("if 1:\n" + text).body[0]
        except SyntaxError:
            return None
        return ast.Module(body=body.body if isinstance(body, ast.If) else [], type_ignores=[])
    return None


def _defines(tree: ast.Module, name: str) -> bool:
    # Guards against a file edited after import: the lines at the code's old
    # position would then hold something else.
    first = tree.body[0] if tree.body else None
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return isinstance(first, defs) and first.name == name


def _normalise_tree(tree: ast.AST, file: str | None) -> _Source:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    refs = _Refs()
    refs.visit(tree)
    digest = hash_bytes(ast.dump(tree, annotate_fields=True, include_attributes=False).encode())
    return _Source(digest, tuple(refs.chains), tuple(refs.imports), file)


class _Refs(ast.NodeVisitor):
    """Name chains read (``a``, ``a.b.c``) and names bound by imports."""

    def __init__(self) -> None:
        self.chains: dict[tuple[str, ...], None] = {}
        self.imports: list[tuple[str, _ImportSpec]] = []

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.chains[(node.id,)] = None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parts = [node.attr]
        value = node.value
        while isinstance(value, ast.Attribute):
            parts.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name):
            self.chains[(value.id, *reversed(parts))] = None
        else:
            self.visit(value)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.imports.append((alias.asname, (alias.name, 0, None)))
            else:
                top = alias.name.partition(".")[0]
                self.imports.append((top, (top, 0, None)))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                spec = (node.module or "", node.level, alias.name)
                self.imports.append((alias.asname or alias.name, spec))


class _ModuleSource:
    """A user module's parsed file: the whole normalised module, and per-name bindings."""

    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path = path
        self._tree = tree
        self._whole: _Source | None = None
        self._index: dict[str, list[ast.stmt]] | None = None
        self._bindings: dict[str, tuple[list[_ImportSpec], _Source | None]] = {}

    def whole(self) -> _Source:
        if self._whole is None:
            self._whole = _normalise_tree(self._tree, self.path)
        return self._whole

    def binding(self, name: str) -> tuple[list[_ImportSpec], _Source | None]:
        """``(import redirects, source of the other statements)`` binding ``name``."""
        if name not in self._bindings:
            if self._index is None:
                self._index = {}
                _index_statements(self._tree.body, self._index)
            redirects: list[_ImportSpec] = []
            stmts: list[ast.stmt] = []
            for stmt in self._index.get(name, []):
                if isinstance(stmt, ast.ImportFrom):
                    redirects += [(stmt.module or "", stmt.level, a.name) for a in stmt.names
                                  if (a.asname or a.name) == name]
                elif not isinstance(stmt, ast.Import):
                    stmts.append(stmt)
            module = ast.Module(body=stmts, type_ignores=[])
            self._bindings[name] = (redirects, _normalise_tree(module, self.path)
                                    if stmts else None)
        return self._bindings[name]


def _index_statements(body: Iterable[ast.stmt], index: dict[str, list[ast.stmt]]) -> None:
    for stmt in body:
        if isinstance(stmt, (ast.If, ast.Try, ast.TryStar, ast.With, ast.For, ast.While)):
            for field in ("body", "orelse", "finalbody"):
                _index_statements(getattr(stmt, field, []), index)
            for handler in getattr(stmt, "handlers", []):
                _index_statements(handler.body, index)
            if not isinstance(stmt, (ast.For, ast.With)):
                continue
        for name in _bound_names(stmt):
            index.setdefault(name, []).append(stmt)


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).partition(".")[0] for a in stmt.names]
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign, ast.For)):
        targets = [stmt.target]
    elif isinstance(stmt, ast.With):
        targets = [i.optional_vars for i in stmt.items if i.optional_vars is not None]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _module_source(module: types.ModuleType) -> _ModuleSource | None:
    path = _source_file(module)
    if path is None:
        return None
    stamp = _stat(path)
    hit = _MODULES.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    info = _ModuleSource(path, tree)
    _MODULES[path] = (stamp, info)
    return info


def _source_file(module: types.ModuleType) -> str | None:
    file = vars(module).get("__file__")
    if not isinstance(file, str):
        return None
    if not file.endswith(".py"):
        try:
            file = inspect.getsourcefile(module)
        except TypeError:
            return None
    return os.path.abspath(file) if file and os.path.isfile(file) else None


def _stat(path: str | None) -> tuple[int, int]:
    try:
        st = os.stat(path) if path else None
    except OSError:
        st = None
    return (st.st_mtime_ns, st.st_size) if st is not None else (-1, -1)


def _code_digest(code: types.CodeType) -> str:
    consts = [_code_digest(c) if isinstance(c, types.CodeType)
              else _constant_repr(c) or type(c).__qualname__ for c in code.co_consts]
    return hash_value({"code": code.co_code.hex(), "names": list(code.co_names),
                       "vars": list(code.co_varnames), "free": list(code.co_freevars),
                       "consts": consts})


def _code_names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _code_names(const)
    return list(dict.fromkeys(names))


# -- values -----------------------------------------------------------------------------


def _constant_repr(value: Any, depth: int = 0) -> str | None:
    """A deterministic text for plain data (scalars, and containers of them), else None."""
    kind = type(value)
    if kind in _SCALARS:
        return repr(value)
    if depth > 32:
        return None
    if kind in (tuple, list, set, frozenset):
        items = [_constant_repr(v, depth + 1) for v in value]
        texts = [i for i in items if i is not None]
        if len(texts) < len(items):
            return None
        if kind in (set, frozenset):
            texts.sort()
        return f"{kind.__name__}({','.join(texts)})"
    if kind is dict:
        pairs = [(_constant_repr(k, depth + 1), _constant_repr(v, depth + 1))
                 for k, v in value.items()]
        if any(k is None or v is None for k, v in pairs):
            return None
        return "dict(" + ",".join(f"{k}:{v}" for k, v in sorted(pairs, key=str)) + ")"
    return None


def _array_repr(value: Any) -> str | None:
    """numpy arrays and scalars by dtype, shape and bytes, without importing numpy."""
    if type(value).__module__ != "numpy":
        return None
    dtype = getattr(value, "dtype", None)
    if dtype is None or getattr(dtype, "hasobject", True):
        return None
    data = value.tobytes()
    return f"ndarray({dtype.str},{getattr(value, 'shape', ())},{hash_bytes(data)})"


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


# -- module kinds and distributions -----------------------------------------------------


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
