"""The lineage as a DAG (``reprise lineage``'s default view): each step run once,
producers before consumers, inputs named by the step and output they came from."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.pipeline._lineage import lineage
from reprise.pipeline._lineage_dag import lineage_steps

# shared ancestors: `split` feeds `featurize`, whose outputs feed both branches; a file
# input at the root; two final outputs
FLOW = '''
import numpy as np
import reprise
from reprise import File, step


@step
def load(src: File) -> np.ndarray:
    return np.array([float(v) for v in src.read_text().split()])


@step
def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x[: len(x) // 2], x[len(x) // 2:]


@step
def featurize(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    m = float(train.mean())
    return train - m, test - m, m


@step
def fit_a(x: np.ndarray) -> float:
    return float(x.std())


@step
def fit_b(x: np.ndarray, shift: float) -> float:
    return float(x.std()) + shift


@step
def score(model: float, test: np.ndarray) -> float:
    return model * float(abs(test).sum())


@reprise.pipeline
def dag(src: File = File("data.txt")):
    tr, te = split(load(src))
    ftr, fte, shift = featurize(tr, te)
    return score(fit_a(ftr), fte), score(fit_b(ftr, shift), fte)
'''


@pytest.fixture
def run_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "dagflow.py").write_text(textwrap.dedent(FLOW))
    (tmp_path / "data.txt").write_text("1 2 3 4 5 6 7 9")
    monkeypatch.chdir(tmp_path)
    ws = reprise.init(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    from reprise.pipeline import load_pipeline

    res = load_pipeline("dagflow.py:dag").run(workers=1)
    yield ws, lineage(ws, res.run_id)
    sys.modules.pop("dagflow", None)


def test_each_step_once_producers_first(run_tree: Any) -> None:
    ws, tree = run_tree
    steps = lineage_steps(ws, tree)
    names = [s["step"] for s in steps]
    assert names[:3] == ["load", "split", "featurize"]  # then the branches, as they ran
    assert sorted(names[3:]) == ["fit_a", "fit_b", "score", "score_2"]
    assert len({s["step_run"] for s in steps}) == len(steps)
    seen: set[str] = set()
    for st in steps:
        for i in st["inputs"]:
            if "from_step_run" in i:
                assert i["from_step_run"] in seen, (st["step"], i)
        seen.add(st["step_run"])


def test_inputs_name_their_producer_output_and_files(run_tree: Any) -> None:
    ws, tree = run_tree
    by = {s["step"]: s for s in lineage_steps(ws, tree)}
    (src,) = by["load"]["inputs"]
    assert src["source"] == "data.txt" and "from_step" not in src
    feats = by["featurize"]["outputs"]
    assert [o["name"] for o in feats] == ["0", "1", "2"]
    shift = next(i for i in by["fit_b"]["inputs"] if i["name"] == "shift")
    assert (shift["from_step"], shift["from_output"]) == ("featurize", "2")
    assert shift["hash"] == feats[2]["hash"]
    finals = [o for s in by.values() for o in s["outputs"] if o["final"]]
    assert {o["hash"] for o in finals} == {n["hash"] for n in tree["nodes"]}
    assert not any(o["final"] for o in by["featurize"]["outputs"])


def test_an_artifact_lineage_lists_only_its_ancestors(run_tree: Any) -> None:
    ws, tree = run_tree
    by = {s["step"]: s for s in lineage_steps(ws, tree)}
    target = by["fit_a"]["outputs"][0]["hash"]
    steps = lineage_steps(ws, lineage(ws, target))
    assert [s["step"] for s in steps] == ["load", "split", "featurize", "fit_a"]
    assert [o["final"] for o in steps[-1]["outputs"]] == [True]


PASS_THROUGH = '''
import reprise
from reprise import File, step


@step
def read(src: File) -> str:
    return src.read_text()


@step
def check(text: str) -> str:
    assert text.strip()
    return text  # passed through unchanged: the same hash as read's output


@step
def size(text: str) -> int:
    return len(text)


@reprise.pipeline
def flow(src: File = File("data.txt")):
    return size(check(read(src)))
'''


def test_an_artifact_lineage_passes_through_a_step_that_returns_its_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By hash (as a registered model's lineage goes), a step whose output is its input
    is not taken for that input's producer: the walk goes on down to the raw file."""
    (tmp_path / "passflow.py").write_text(textwrap.dedent(PASS_THROUGH))
    (tmp_path / "data.txt").write_text("some text")
    monkeypatch.chdir(tmp_path)
    ws = reprise.init(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    from reprise.pipeline import load_pipeline

    try:
        res = load_pipeline("passflow.py:flow").run(workers=1)
        (final,) = lineage(ws, res.run_id)["nodes"]
        steps = lineage_steps(ws, lineage(ws, final["hash"]))
        assert [s["step"] for s in steps] == ["read", "check", "size"]
        (src,) = steps[0]["inputs"]
        assert src["source"] == "data.txt"
    finally:
        sys.modules.pop("passflow", None)
        ws.close()
