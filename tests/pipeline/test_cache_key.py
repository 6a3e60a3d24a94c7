"""Unit tests of what the cache key covers: code, helpers, constants, package
versions, params, inputs, seeds; and of definition errors caught at build time."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from reprise.pipeline import PipelineDefinitionError, pipeline, step
from reprise.pipeline import _fingerprint as fpmod
from reprise.pipeline import _walker as walkmod
from reprise.pipeline._pipeline import Graph, Node
from reprise.pipeline._runner import step_seed

_counter = [0]


def load(tmp_path: Path, source: str, helpers: str = "def helper(x):\n    return x + 1\n",
         ) -> ModuleType:
    """Write a module and its helper module into a fresh folder and import them under
    the same names every time (as a user's edited project would be)."""
    _counter[0] += 1
    d = tmp_path / f"v{_counter[0]}"
    d.mkdir()
    (d / "ck_helpers.py").write_text(helpers)
    (d / "ck_mod.py").write_text(textwrap.dedent(source).replace("HELPERS", "ck_helpers"))
    for name in ("ck_mod", "ck_helpers"):
        sys.modules.pop(name, None)
    sys.path.insert(0, str(d))
    try:
        spec = importlib.util.spec_from_file_location("ck_mod", d / "ck_mod.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["ck_mod"] = mod
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(d))


BASE = '''
import json
import HELPERS as helpers
from HELPERS import helper

LIMIT = 3

def uses_helper(x):
    """doc"""
    return helper(x) * 2

def uses_attr(x):
    return helpers.helper(x)

def uses_const(x):
    return x + LIMIT

def unrelated(x):
    return x - 1

def recursive(x):
    return recursive(x - 1) if x else 0

def uses_json(x):
    return json.dumps(x)
'''


def fp(mod: ModuleType, name: str) -> str:
    return fpmod.code_fingerprint(getattr(mod, name)).hash


def test_comments_docstrings_and_formatting_do_not_count(tmp_path: Path) -> None:
    a = load(tmp_path, BASE)
    b = load(tmp_path, BASE.replace('"""doc"""', '"""other doc"""\n    # a comment')
             .replace("helper(x) * 2", "helper( x )*2"))
    assert fp(a, "uses_helper") == fp(b, "uses_helper")


def test_body_change_counts(tmp_path: Path) -> None:
    a = load(tmp_path, BASE)
    b = load(tmp_path, BASE.replace("helper(x) * 2", "helper(x) * 3"))
    assert fp(a, "uses_helper") != fp(b, "uses_helper")


def test_helper_change_counts_directly_and_by_attribute(tmp_path: Path) -> None:
    a = load(tmp_path, BASE)
    b = load(tmp_path, BASE, helpers="def helper(x):\n    return x + 2\n")
    assert fp(a, "uses_helper") != fp(b, "uses_helper")
    assert fp(a, "uses_attr") != fp(b, "uses_attr")
    assert fp(a, "unrelated") == fp(b, "unrelated")


def test_unrelated_function_change_does_not_count(tmp_path: Path) -> None:
    a = load(tmp_path, BASE)
    b = load(tmp_path, BASE.replace("return x - 1", "return x - 100"))
    assert fp(a, "uses_helper") == fp(b, "uses_helper")
    assert fp(a, "unrelated") != fp(b, "unrelated")


def test_constant_change_counts(tmp_path: Path) -> None:
    a = load(tmp_path, BASE)
    b = load(tmp_path, BASE.replace("LIMIT = 3", "LIMIT = 4"))
    assert fp(a, "uses_const") != fp(b, "uses_const")
    assert fp(a, "uses_helper") == fp(b, "uses_helper")


def test_recursion_terminates(tmp_path: Path) -> None:
    a = load(tmp_path, BASE)
    assert len(fp(a, "recursive")) == 64


def test_package_upgrade_changes_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load(tmp_path, BASE.replace("import json", "import json\nimport numpy as np")
               + "\ndef uses_numpy(x):\n    return np.asarray(x)\n")
    before = fpmod.code_fingerprint(mod.uses_numpy)
    assert "numpy" in before.distributions
    real = walkmod._dist_version
    monkeypatch.setattr(walkmod, "_dist_version",
                        lambda name: "999.0" if name == "numpy" else real(name))
    after = fpmod.code_fingerprint(mod.uses_numpy)
    assert after.distributions["numpy"] == "999.0" and after.hash != before.hash


def test_source_less_function_is_never_cached() -> None:
    ns: dict[str, Any] = {}
    exec("def f(x):\n    return x\n", ns)  # noqa: S102 - no source on purpose
    a, b = fpmod.code_fingerprint(ns["f"]), fpmod.code_fingerprint(ns["f"])
    assert not a.exact and a.hash != b.hash


def test_step_seed_depends_only_on_run_seed_and_name() -> None:
    assert step_seed(0, "train") == step_seed(0, "train")
    assert step_seed(0, "train") != step_seed(1, "train")
    assert step_seed(0, "train") != step_seed(0, "split")


@step
def _produce(n: int) -> int:
    return n


@step
def _consume(a: int) -> int:
    return a


class Opaque:
    pass


@step
def _opaque() -> Opaque:
    return Opaque()


def test_step_called_outside_pipeline_is_an_error() -> None:
    with pytest.raises(PipelineDefinitionError, match="outside a pipeline"):
        _produce(1)
    assert _produce.func(2) == 2


def test_non_serialisable_output_type_is_reported_with_the_step() -> None:
    @pipeline
    def p() -> None:
        _opaque()

    with pytest.raises(PipelineDefinitionError, match="_opaque.*Opaque"):
        p.build()


def test_unknown_input_and_bad_arguments_are_reported() -> None:
    @pipeline
    def p1() -> None:
        _consume(object())

    with pytest.raises(PipelineDefinitionError, match="not a step output"):
        p1.build()

    @pipeline
    def p2() -> None:
        _consume(1, 2)

    with pytest.raises(PipelineDefinitionError, match="_consume.*test_cache_key.py:"):
        p2.build()


def test_cycle_is_reported() -> None:
    g = Graph(pipeline="x", params={}, nodes={
        "a": Node("a", _consume, {}, "f.py:1", ["output"], upstream=["b"]),
        "b": Node("b", _consume, {}, "f.py:2", ["output"], upstream=["a"]),
    })
    with pytest.raises(PipelineDefinitionError, match="cycle.*a \\(f.py:1\\)"):
        g.check_acyclic()


def test_pipeline_runs_from_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import reprise

    ws = reprise.init(tmp_path / "ws")

    @pipeline
    def p(n: int = 2) -> Any:
        return _consume(_produce(n))

    res = p.run(n=5, workspace=ws, workers=1)
    assert res["_consume"] == 5 and sorted(res.executed) == ["_consume", "_produce"]
    again = p.run(n=5, workspace=ws, workers=1)
    assert again.executed == [] and again.time_saved >= 0


def test_a_cache_entry_is_a_miss_once_a_distribution_its_outputs_require_changed(
        tmp_path: Path) -> None:
    from importlib import metadata

    from reprise.core._hashing import hash_bytes
    from reprise.pipeline._cache import StepCache
    from reprise.store._artifacts import open_artifact_store

    store = open_artifact_store(tmp_path / "artifacts")
    blob, _ = store.put_bytes(b"a model package")
    cache = StepCache(tmp_path / "cache")
    numpy = metadata.version("numpy")
    for name, requires in (("same", {"numpy": numpy}), ("upgraded", {"numpy": "0.0.1"})):
        key = hash_bytes(name.encode())
        cache.put(key, {"outputs": [{"name": "output", "hash": blob}], "requires": requires})
        assert (cache.get(key, store) is not None) is (name == "same")
