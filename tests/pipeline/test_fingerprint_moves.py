"""Code fingerprints across moves: a function moved unchanged to another module keeps
its key where that is safe, and names that resolve differently change it.

Each version of a small package is written to a fresh folder under one package name
and imported; ``fp(files, "module:function")`` fingerprints a function of it.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reprise.pipeline._fingerprint import CodeFingerprint, code_fingerprint

Files = dict[str, str]
Fingerprinter = Callable[[Files, str], CodeFingerprint]

HELPERS = textwrap.dedent('''
    FACTOR = 3


    def helper(x):
        return x * FACTOR
''')

STEP = textwrap.dedent('''
    def f(x):
        return helper(x) + 1
''')


@pytest.fixture
def fp(tmp_path: Path) -> Iterator[Fingerprinter]:
    pkg = f"fpmove_{uuid.uuid4().hex[:10]}"
    count = iter(range(1000))
    added: list[str] = []

    def unload() -> None:
        for name in [m for m in sys.modules if m == pkg or m.startswith(pkg + ".")]:
            del sys.modules[name]
        for root in added:
            if root in sys.path:
                sys.path.remove(root)

    def _fp(files: Files, target: str) -> CodeFingerprint:
        unload()
        root = tmp_path / f"v{next(count)}"
        for name, text in {"__init__.py": "", **files}.items():
            path = root / pkg / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.replace("PKG", pkg))
        sys.path.insert(0, str(root))
        added.append(str(root))
        importlib.invalidate_caches()
        module, _, func = target.partition(":")
        return code_fingerprint(getattr(importlib.import_module(f"{pkg}.{module}"), func))

    yield _fp
    unload()


def test_a_function_moved_with_its_helpers_keeps_its_key(fp: Fingerprinter) -> None:
    before = fp({"a.py": HELPERS + STEP, "b.py": ""}, "a:f")
    after = fp({"a.py": "", "b.py": HELPERS + STEP}, "b:f")
    assert before.exact and after.exact
    assert after.hash == before.hash
    assert set(after.functions) != set(before.functions)  # the labels still say where


@pytest.mark.parametrize("how", ["from .a import helper", "from PKG.a import helper",
                                 "from . import a\nhelper = a.helper"])
def test_a_function_moved_away_from_its_helpers_keeps_its_key(
        fp: Fingerprinter, how: str) -> None:
    before = fp({"a.py": HELPERS + STEP}, "a:f")
    after = fp({"a.py": HELPERS, "b.py": how + "\n" + STEP}, "b:f")
    assert after.hash == before.hash


def test_a_function_moved_next_to_another_helper_changes_its_key(fp: Fingerprinter) -> None:
    before = fp({"a.py": HELPERS + STEP}, "a:f")
    # the same source in b, but ``helper`` there is another function
    other = HELPERS.replace("x * FACTOR", "x * FACTOR * 2")
    assert fp({"a.py": HELPERS, "b.py": other + STEP}, "b:f").hash != before.hash
    # or the same function with another constant
    other = HELPERS.replace("FACTOR = 3", "FACTOR = 4")
    assert fp({"a.py": HELPERS, "b.py": other + STEP}, "b:f").hash != before.hash


def test_what_each_name_resolves_to_counts_not_only_what_is_reachable(
        fp: Fingerprinter) -> None:
    lib = textwrap.dedent('''
        def p():
            return 1


        def q():
            return 2
    ''')
    step = textwrap.dedent('''
        def s():
            return helper() - other()
    ''')
    one = fp({"lib.py": lib, "a.py": "from .lib import p as helper, q as other\n" + step}, "a:s")
    swapped = fp({"lib.py": lib, "a.py": "from .lib import q as helper, p as other\n" + step},
                 "a:s")
    assert set(one.functions) == set(swapped.functions)  # the same code is reachable
    assert swapped.hash != one.hash
    moved = fp({"lib.py": lib, "b.py": "from .lib import q as helper, p as other\n" + step},
               "b:s")
    assert moved.hash == swapped.hash


@pytest.mark.parametrize("body", [
    "return (__name__, helper(x))",
    "return Path(__file__).parent / str(helper(x))",
    "return logging.getLogger(__name__).name, helper(x)",
    "return globals()['helper'](x)",
    "return helper.__module__, helper(x)",
    "return inspect.getmodule(helper), helper(x)",
], ids=["__name__", "__file__", "logger", "globals", "__module__", "inspect"])
def test_a_function_reading_its_own_module_keeps_the_module_in_its_key(
        fp: Fingerprinter, body: str) -> None:
    code = ("import inspect\nimport logging\nfrom pathlib import Path\n" + HELPERS
            + f"\n\ndef f(x):\n    {body}\n")
    before = fp({"a.py": code}, "a:f")
    assert before.exact
    assert fp({"b.py": code}, "b:f").hash != before.hash


def test_a_function_used_as_a_value_keeps_the_module_in_its_key(fp: Fingerprinter) -> None:
    # ``helper`` could end up stored by its module's name (a FunctionTransformer's func)
    step = textwrap.dedent('''
        def f(xs):
            return list(map(helper, xs))
    ''')
    before = fp({"a.py": HELPERS + step}, "a:f")
    assert fp({"b.py": HELPERS + step}, "b:f").hash != before.hash
    # moving only the caller is safe: the helper stays where it was
    assert fp({"a.py": HELPERS, "b.py": "from .a import helper\n" + step}, "b:f").hash \
        == before.hash


def test_a_moved_class_changes_the_key(fp: Fingerprinter) -> None:
    code = textwrap.dedent('''
        class Model:
            def fit(self, x):
                return x * 2


        def f(x):
            return Model().fit(x)
    ''')
    assert fp({"b.py": code}, "b:f").hash != fp({"a.py": code}, "a:f").hash


def test_two_helpers_of_one_name_stay_apart(fp: Fingerprinter) -> None:
    step = textwrap.dedent('''
        from . import c
        from .a import helper


        def f(x):
            return helper(x) + c.helper(x)
    ''')
    c = "def helper(x):\n    return x - 1\n"
    base = fp({"a.py": HELPERS, "b.py": step, "c.py": c}, "b:f")
    assert {k.split(":")[1] for k in base.functions} == {"f", "helper"}
    assert len(base.functions) == 3
    assert fp({"a.py": HELPERS, "d.py": step, "c.py": c}, "d:f").hash == base.hash
    edited = fp({"a.py": HELPERS, "b.py": step, "c.py": c.replace("x - 1", "x - 2")}, "b:f")
    assert edited.hash != base.hash
    # the two helpers swap places: each name resolves to the other's code
    swapped = fp({"a.py": "FACTOR = 3\n\n\n" + c, "b.py": step,
                  "c.py": textwrap.dedent(HELPERS)}, "b:f")
    assert swapped.hash != base.hash


def test_a_recursive_function_moved_keeps_its_key_and_still_sees_itself(
        fp: Fingerprinter) -> None:
    code = textwrap.dedent('''
        def fact(n):
            return 1 if n <= 1 else n * fact(n - 1)


        def other(n):
            return 1
    ''')
    before = fp({"a.py": code}, "a:fact")
    assert fp({"b.py": code}, "b:fact").hash == before.hash
    # the name now means another function: no longer a recursion
    rebound = code + "\n\nfact_impl, fact = fact, other\n"
    assert fp({"a.py": rebound}, "a:fact_impl").hash != before.hash
