"""Normalised sources of functions, classes and modules for code fingerprints.

Comments, docstrings and formatting vanish from the syntax tree; what a definition
references (names, imports) is collected with it. Parsed sources are cached per object
and per state of its file (mtime, size).
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import os
import sys
import textwrap
import types
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprise.core._hashing import hash_bytes, hash_value

_ImportSpec = tuple[str, int, "str | None"]  # (module, relative level, first attribute)
_SCALARS = (type(None), bool, int, float, complex, str, bytes)

#: Names through which code sees the module it is written in (its name, file, package,
#: namespace) or runs code the walk cannot follow; also read as attributes
#: (``f.__module__``, ``sys._getframe()``), and anything under ``inspect``. Code using one
#: of them may behave differently in another module: its key keeps its module's name.
IDENTITY_NAMES = frozenset({
    "__name__", "__file__", "__package__", "__spec__", "__path__", "__loader__",
    "__cached__", "__builtins__", "__module__", "__globals__", "globals", "vars", "eval",
    "exec", "__import__", "_getframe", "inspect"})


@dataclass(frozen=True)
class _Source:
    """A normalised source: its hash, the name chains it uses (``values``: those used
    otherwise than called, e.g. passed as an argument), its local imports, and whether
    it looks at the module it lives in (``identity``, see :data:`IDENTITY_NAMES`)."""

    digest: str | None
    chains: tuple[tuple[str, ...], ...] = ()
    imports: tuple[tuple[str, _ImportSpec], ...] = ()
    file: str | None = None
    identity: bool = False
    values: frozenset[tuple[str, ...]] = frozenset()

    @functools.cached_property
    def by_root(self) -> dict[str, list[tuple[tuple[str, ...], str, bool]]]:
        """The chains by their first name, each with its text and whether it is a value."""
        out: dict[str, list[tuple[tuple[str, ...], str, bool]]] = {}
        for chain in self.chains:
            out.setdefault(chain[0], []).append((chain, ".".join(chain), chain in self.values))
        return out


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
    return _Source(digest, tuple(refs.chains), tuple(refs.imports), file, refs.identity,
                   frozenset(refs.values))


class _Refs(ast.NodeVisitor):
    """Name chains read (``a``, ``a.b.c``), those of them used as values rather than
    called, names bound by imports, and whether the code shows the module it lives in."""

    def __init__(self) -> None:
        self.chains: dict[tuple[str, ...], None] = {}
        self.values: set[tuple[str, ...]] = set()
        self.imports: list[tuple[str, _ImportSpec]] = []
        self.identity = False

    def visit_Call(self, node: ast.Call) -> None:
        chain = _chain(node.func)
        if chain is not None:
            self.add(chain, called=True)
        else:
            self.visit(node.func)
        for arg in (*node.args, *node.keywords):
            self.visit(arg)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in IDENTITY_NAMES:
            self.identity = True
        if isinstance(node.ctx, ast.Load):
            self.add((node.id,), called=False)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = _chain(node)
        if chain is None:
            if node.attr in IDENTITY_NAMES:
                self.identity = True
            self.visit(node.value)
        else:
            self.add(chain, called=False)

    def add(self, chain: tuple[str, ...], *, called: bool) -> None:
        if IDENTITY_NAMES.intersection(chain):
            self.identity = True
        self.chains[chain] = None
        if not called:
            self.values.add(chain)

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


def _chain(node: ast.expr) -> tuple[str, ...] | None:
    """``("a", "b", "c")`` for ``a.b.c``; None when it does not start at a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return (node.id, *reversed(parts))


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
