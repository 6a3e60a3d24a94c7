"""Fan-in: a list of step outputs passed as one input arrives as a list of values,
each item counts in the cache key, and the lineage records every item."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import reprise
from reprise.pipeline import PipelineDefinitionError

FLOW = '''
import reprise
from reprise import step


@step
def part(i: int, scale: float) -> float:
    return i * scale


@step
def total(parts: list) -> dict:
    return {"sum": sum(parts), "n": len(parts)}


@reprise.pipeline
def fan(k: int = 3, scale: float = 1.0, first: float = 1.0):
    parts = [part(i, first if i == 0 else scale) for i in range(k)]
    return total(parts)


@reprise.pipeline
def mixed():
    return total([part(0, 1.0), 2.0])
'''


@pytest.fixture
def flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    (tmp_path / "fanflow.py").write_text(textwrap.dedent(FLOW))
    monkeypatch.chdir(tmp_path)
    reprise.init(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    from reprise.pipeline import load_pipeline

    yield load_pipeline("fanflow.py:fan"), load_pipeline("fanflow.py:mixed")
    sys.modules.pop("fanflow", None)


def test_a_list_of_outputs_arrives_as_a_list_in_order(flow) -> None:  # type: ignore[no-untyped-def]
    fan, _ = flow
    res = fan.run(k=4, scale=2.0, workers=1)
    assert res["total"] == {"sum": 0 + 2.0 + 4.0 + 6.0, "n": 4}
    assert sorted(res.executed) == ["part", "part_2", "part_3", "part_4", "total"]


def test_each_item_counts_in_the_key(flow) -> None:  # type: ignore[no-untyped-def]
    fan, _ = flow
    fan.run(k=3, workers=1)
    again = fan.run(k=3, workers=1)
    assert sorted(again.reused) == ["part", "part_2", "part_3", "total"]
    # only the first item changes (0 * first stays 0.0, so its hash does not): use k items
    # whose values change instead
    changed = fan.run(k=3, scale=3.0, workers=1)
    assert set(changed.executed) == {"part_2", "part_3", "total"}
    assert changed["total"]["sum"] == 0 + 3.0 + 6.0


def test_lineage_records_every_item(flow) -> None:  # type: ignore[no-untyped-def]
    fan, _ = flow
    res = fan.run(k=2, workers=1)
    ws = reprise.open_workspace()
    steps = {s["step_name"]: s for s in ws.metadata.get_step_runs(res.run_id)}
    names = sorted(i["name"] for i in steps["total"]["inputs"])
    assert names == ["parts[0]", "parts[1]"]


def test_a_list_mixing_outputs_and_values_is_refused_at_build(flow) -> None:  # type: ignore[no-untyped-def]
    _, mixed = flow
    with pytest.raises(PipelineDefinitionError, match="a list made only of step outputs"):
        mixed.build()
