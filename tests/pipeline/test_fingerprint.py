"""Code fingerprints: what changes a step's key, what does not, and what makes it inexact.

Each case writes a small fixture package to a fresh directory, imports it under
one package name, fingerprints an entry point and unloads it again; an "edit"
is the same package written again with one replacement applied.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import reprise.pipeline._fingerprint as fpmod
import reprise.pipeline._walker as walkmod
from reprise.pipeline._fingerprint import (
    CodeFingerprint,
    code_fingerprint,
    is_user_module,
    normalised_source_hash,
)

BASE = {
    "__init__.py": "",
    "helpers.py": '''
        import numpy as np

        FACTOR = 3
        SETTINGS = {"depth": 2, "names": ("a", "b")}


        class Config:
            def __init__(self, lr):
                self.lr = lr


        CONFIG = Config(lr=0.1)
        double = lambda x: x * 2  # noqa: E731


        def scale(x):
            return inner(x) * FACTOR


        def inner(x):
            return x + 1


        def unrelated():
            return 0
    ''',
    "tools/__init__.py": "",
    "tools/mathx.py": '''
        def triple(x):
            return 3 * x
    ''',
    "step.py": '''
        """The step module."""
        import functools
        import sqlalchemy

        import PKG.tools.mathx
        from . import helpers
        from .helpers import scale


        class Model:
            def fit(self, x):
                return x * 2


        def train(x):
            """Train it."""
            # a comment
            model = Model()
            return scale(x) + helpers.inner(x) + model.fit(x)


        def direct(x):
            return scale(x)


        def via_attr(x):
            return helpers.inner(x)


        def via_chain(x):
            return PKG.tools.mathx.triple(x)


        def lazy(x):
            from .helpers import inner
            return inner(x)


        def lazy_third_party():
            import alembic
            return alembic.__version__


        def uses_settings():
            return helpers.SETTINGS["depth"]


        def uses_config():
            return helpers.CONFIG.lr


        def uses_lambda(x):
            return helpers.double(x)


        def dynamic(name):
            return getattr(helpers, name)()


        def fact(n):
            return 1 if n <= 1 else n * fact(n - 1)


        def is_even(n):
            return True if n == 0 else is_odd(n - 1)


        def is_odd(n):
            return False if n == 0 else is_even(n - 1)


        def make_scaler(k):
            def scaled(x):
                return x * k
            return scaled


        scaled_by_3 = make_scaler(3)
        scaled_by_4 = make_scaler(4)
        scaled_by_object = make_scaler(object())


        def logged(func):
            @functools.wraps(func)
            def wrapper(*args):
                return func(*args)
            return wrapper


        @logged
        def decorated(x):
            return x - 1


        def calls_decorated(x):
            return decorated(x)


        def other():
            return 1
    ''',
}

Edit = tuple[str, str, str]
Fingerprinter = Callable[..., CodeFingerprint]


@pytest.fixture
def pkg_name() -> str:
    return f"fpfix_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def load(tmp_path: Path, pkg_name: str) -> Iterator[Callable[..., Any]]:
    """``load(*edits)`` writes the fixture package with edits applied and imports it."""
    roots: list[str] = []
    count = iter(range(1000))

    def _load(*edits: Edit) -> Any:
        unload()
        files = {name: textwrap.dedent(text).replace("PKG", pkg_name)
                 for name, text in BASE.items()}
        for name, old, new in edits:
            assert old in files[name], f"{old!r} is not in {name}"
            files[name] = files[name].replace(old, new)
        root = tmp_path / f"v{next(count)}"
        for name, text in files.items():
            path = root / pkg_name / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        sys.path.insert(0, str(root))
        roots.append(str(root))
        importlib.invalidate_caches()
        return importlib.import_module(f"{pkg_name}.step")

    def unload() -> None:
        for name in [m for m in sys.modules if m == pkg_name or m.startswith(pkg_name + ".")]:
            del sys.modules[name]
        for root in roots:
            if root in sys.path:
                sys.path.remove(root)

    yield _load
    unload()


@pytest.fixture
def fingerprint(load: Callable[..., Any]) -> Fingerprinter:
    """``fingerprint(entry, *edits)``: the fingerprint of ``step.<entry>`` in that version."""

    def _fingerprint(entry: str, *edits: Edit, **kwargs: Any) -> CodeFingerprint:
        return code_fingerprint(getattr(load(*edits), entry), **kwargs)

    return _fingerprint


def test_comments_docstrings_and_formatting_do_not_count(fingerprint: Fingerprinter) -> None:
    base = fingerprint("train")
    same = fingerprint(
        "train",
        ("step.py", '"""Train it."""', '"""Train the model, at length."""'),
        ("step.py", "# a comment", "# another comment\n    # and more"),
        ("step.py", "return scale(x) + helpers.inner(x) + model.fit(x)",
         "return (scale(x) +\n            helpers.inner(x)   +  model.fit( x ))"),
        ("step.py", '"""The step module."""', '"""Edited module docstring."""\n\n\n'),
        ("helpers.py", "return x + 1", "return x+1  # spaced differently"),
    )
    assert same.exact and base.exact
    assert same.hash == base.hash
    assert same.functions == base.functions


def test_changing_the_step_body_changes_the_key(fingerprint: Fingerprinter) -> None:
    base = fingerprint("train")
    edited = fingerprint("train", ("step.py", "model.fit(x)\n", "model.fit(x) + 1\n"))
    assert edited.hash != base.hash


@pytest.mark.parametrize(("entry", "edit"), [
    ("direct", ("helpers.py", "return inner(x) * FACTOR", "return inner(x) * FACTOR * 2")),
    ("direct", ("helpers.py", "return x + 1", "return x + 2")),  # scale -> inner
    ("via_attr", ("helpers.py", "return x + 1", "return x + 2")),
    ("via_chain", ("tools/mathx.py", "return 3 * x", "return x * 3")),
    ("lazy", ("helpers.py", "return x + 1", "return x + 2")),
    ("uses_lambda", ("helpers.py", "lambda x: x * 2", "lambda x: x * 3")),
    ("decorated", ("step.py", "return x - 1", "return x - 2")),
    ("decorated", ("step.py", "return func(*args)", "return func(*args[:1])")),
    ("calls_decorated", ("step.py", "return x - 1", "return x - 2")),
    ("dynamic", ("helpers.py", "return 0", "return -1")),  # getattr: the whole module
], ids=["direct", "transitive", "attribute", "module-chain", "local-import", "lambda",
        "wrapped", "decorator", "through-wrapper", "dynamic-attribute"])
def test_changing_code_the_step_reaches_changes_the_key(
        fingerprint: Fingerprinter, entry: str, edit: Edit) -> None:
    base = fingerprint(entry)
    edited = fingerprint(entry, edit)
    assert base.exact and edited.exact
    assert edited.hash != base.hash


@pytest.mark.parametrize("edit", [
    ("helpers.py", "return 0", "return -1"),
    ("step.py", "return 1\n", "return 2\n"),
    ("tools/mathx.py", "return 3 * x", "return x * 3"),
], ids=["other-module", "same-module", "unreferenced-module"])
def test_changing_unrelated_code_keeps_the_key(fingerprint: Fingerprinter, edit: Edit) -> None:
    for entry in ("train", "direct", "via_attr"):
        assert fingerprint(entry, edit).hash == fingerprint(entry).hash, entry


@pytest.mark.parametrize(("entry", "edit"), [
    ("direct", ("helpers.py", "FACTOR = 3", "FACTOR = 4")),
    ("uses_settings", ("helpers.py", '"depth": 2', '"depth": 3')),
    ("uses_settings", ("helpers.py", '("a", "b")', '["a", "b"]')),
    ("uses_config", ("helpers.py", "Config(lr=0.1)", "Config(lr=0.2)")),
    ("uses_config", ("helpers.py", "self.lr = lr", "self.lr = lr * 2")),
], ids=["int", "dict-value", "tuple-vs-list", "module-level-object", "object-class"])
def test_changing_referenced_module_level_values_changes_the_key(
        fingerprint: Fingerprinter, entry: str, edit: Edit) -> None:
    assert fingerprint(entry, edit).hash != fingerprint(entry).hash


def test_constants_are_hashed_by_value_not_by_spelling(fingerprint: Fingerprinter) -> None:
    base = fingerprint("uses_settings")
    reordered = fingerprint("uses_settings", (
        "helpers.py", 'SETTINGS = {"depth": 2, "names": ("a", "b")}',
        'SETTINGS = {"names": ("a",  "b"), "depth": 1 + 1}'))
    assert reordered.hash == base.hash
    assert any(key.endswith(".helpers:SETTINGS") for key in base.constants)


def test_recursion_and_mutual_recursion_terminate(load: Callable[..., Any]) -> None:
    step = load()
    assert code_fingerprint(step.fact).exact
    mutual = code_fingerprint(step.is_even)
    assert {k.split(":")[1] for k in mutual.functions} == {"is_even", "is_odd"}
    assert code_fingerprint(step.is_odd).hash != mutual.hash


def test_third_party_distributions_and_their_versions_count(
        fingerprint: Fingerprinter, monkeypatch: pytest.MonkeyPatch) -> None:
    base = fingerprint("direct")
    # numpy: imported by the helper module the step reaches; sqlalchemy: by the step's own.
    assert base.distributions["numpy"] == importlib.metadata.version("numpy")
    assert base.distributions["sqlalchemy"] == importlib.metadata.version("sqlalchemy")
    monkeypatch.setattr(walkmod, "_dist_version", lambda name: "0.0+upgraded")
    upgraded = fingerprint("direct")
    assert upgraded.distributions["numpy"] == "0.0+upgraded"
    assert upgraded.hash != base.hash


def test_a_local_third_party_import_counts_without_being_imported(
        fingerprint: Fingerprinter) -> None:
    was_loaded = "alembic" in sys.modules
    fp = fingerprint("lazy_third_party")
    assert fp.distributions["alembic"] == importlib.metadata.version("alembic")
    assert ("alembic" in sys.modules) == was_loaded


def test_a_deep_chain_of_helpers_is_walked_without_recursion(
        tmp_path: Path, pkg_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    depth = 1500  # deeper than the interpreter's recursion limit allows to recurse
    lines = [f"def f{i}(x):\n    return f{i + 1}(x) + 1\n" for i in range(depth)]
    (tmp_path / f"{pkg_name}.py").write_text("\n".join(lines) + f"def f{depth}(x):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        fp = code_fingerprint(importlib.import_module(pkg_name).f0)
    finally:
        sys.modules.pop(pkg_name, None)
    assert fp.exact
    assert len(fp.functions) == depth + 1


def test_code_without_source_is_inexact_and_never_repeats() -> None:
    namespace: dict[str, Any] = {"__name__": "fp_exec_namespace"}
    exec(compile("def made(x):\n    return x + 1\n", "<fp-test>", "exec"), namespace)
    first, second = code_fingerprint(namespace["made"]), code_fingerprint(namespace["made"])
    assert not first.exact and not second.exact
    assert first.hash != second.hash


def test_a_helper_without_source_makes_the_step_inexact(load: Callable[..., Any]) -> None:
    step = load()
    namespace: dict[str, Any] = {"__name__": "fp_exec_namespace"}
    exec(compile("def inner(x):\n    return x + 5\n", "<fp-test>", "exec"), namespace)
    step.helpers.inner = namespace["inner"]
    assert not code_fingerprint(step.via_attr).exact


def test_a_referenced_class_is_part_of_the_key(fingerprint: Fingerprinter) -> None:
    base = fingerprint("train")
    assert any(key.endswith(".step:Model") for key in base.functions)
    edited = fingerprint("train", ("step.py", "return x * 2", "return x * 3"))
    assert edited.hash != base.hash


def test_modules_lists_the_users_files_in_the_closure(
        load: Callable[..., Any], pkg_name: str) -> None:
    step = load()
    pkg_dir = Path(step.__file__).parent
    # with the __init__ of every package on the way: a snapshot must import the same
    assert code_fingerprint(step.direct).modules == sorted(
        [str(pkg_dir / "__init__.py"), str(pkg_dir / "helpers.py"), str(pkg_dir / "step.py")])
    assert code_fingerprint(step.via_chain).modules == sorted(
        [str(pkg_dir / "__init__.py"), str(pkg_dir / "step.py"),
         str(pkg_dir / "tools" / "__init__.py"), str(pkg_dir / "tools" / "mathx.py")])
    assert code_fingerprint(step.via_chain).import_paths == [str(pkg_dir.parent)]
    fp = code_fingerprint(step.direct, user_roots=[pkg_dir.parent])
    assert all(Path(m).is_absolute() for m in fp.modules)
    assert set(fp.functions) == {f"{pkg_name}.step:direct", f"{pkg_name}.helpers:scale",
                                 f"{pkg_name}.helpers:inner"}


def test_closures_count_by_the_values_they_capture(load: Callable[..., Any]) -> None:
    step = load()
    by_3, by_4 = code_fingerprint(step.scaled_by_3), code_fingerprint(step.scaled_by_4)
    assert by_3.exact and by_4.exact
    assert by_3.hash != by_4.hash
    assert code_fingerprint(step.scaled_by_3).hash == by_3.hash
    assert not code_fingerprint(step.scaled_by_object).exact


def test_wrappers_are_seen_through(load: Callable[..., Any]) -> None:
    step = load()

    class FakeStep:
        def __init__(self, func: Callable[..., Any]) -> None:
            self.__reprise_func__ = func

        def __call__(self, *args: Any) -> Any:
            return self.__reprise_func__(*args)

    plain = code_fingerprint(step.direct)
    assert code_fingerprint(FakeStep(step.direct)).hash == plain.hash
    assert code_fingerprint(functools.wraps(step.direct)(lambda x: x)).hash == plain.hash


def test_a_partial_counts_its_function_and_arguments(load: Callable[..., Any]) -> None:
    step = load()
    one = code_fingerprint(functools.partial(step.direct, 1))
    assert any(key.endswith(".step:direct") for key in one.functions)
    assert code_fingerprint(functools.partial(step.direct, 2)).hash != one.hash


def test_fingerprints_are_deterministic_and_repeatable(load: Callable[..., Any]) -> None:
    step = load()
    first = code_fingerprint(step.train)
    for _ in range(20):  # the warm path: cached sources, names re-resolved
        assert code_fingerprint(step.train) == first
    assert first.exact and len(first.hash) == 64


def test_a_file_edited_after_import_is_not_trusted(load: Callable[..., Any]) -> None:
    step = load()
    path = Path(step.__file__)
    path.write_text("x = 1\n" * 30 + path.read_text())
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert not code_fingerprint(step.other).exact


def test_is_user_module(load: Callable[..., Any], tmp_path: Path) -> None:
    step = load()
    assert is_user_module(step)
    assert is_user_module(step.__name__)
    assert is_user_module(step, user_roots=[Path(step.__file__).parents[1]])
    # Outside the roots, but provided by no distribution: still the user's code.
    assert is_user_module(step, user_roots=[tmp_path / "elsewhere"])
    assert not is_user_module("json")
    assert not is_user_module(importlib.import_module("numpy"))
    assert not is_user_module(fpmod)


def test_normalised_source_hash(load: Callable[..., Any]) -> None:
    step = load()
    assert normalised_source_hash(step.Model) != normalised_source_hash(step.direct)
    assert len(normalised_source_hash(step.direct)) == 64
    namespace: dict[str, Any] = {}
    exec("def made():\n    pass\n", namespace)
    with pytest.raises(OSError, match="no source"):
        normalised_source_hash(namespace["made"])
    with pytest.raises(TypeError):
        normalised_source_hash(3)
