"""constraints-floors.txt holds exactly pyproject.toml's floors (make test-floors tests them)."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def floors() -> dict[str, Any]:
    return runpy.run_path(str(ROOT / ".ci" / "floors.py"))


def test_the_committed_floors_are_pyprojects(floors: dict[str, Any]) -> None:
    found = floors["floors"]()
    assert (ROOT / "constraints-floors.txt").read_text() == floors["render"](found), (
        "constraints-floors.txt is stale: run `python .ci/floors.py --write` and commit it")
    assert found["scikit-learn"] == "1.7" and found["pandera"] == "0.28"  # extras dropped


def test_every_core_dependency_needs_a_floor(floors: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\ndependencies = ["numpy>=1.26,<3", "pandera[pandas] >= 0.28", "rich<16"]\n')
    with pytest.raises(SystemExit, match="'rich<16' has no '>=' floor"):
        floors["floors"](tmp_path / "pyproject.toml")


def test_release_numbers_compare_padded(floors: dict[str, Any]) -> None:
    release = floors["_release"]
    assert release("1.0.0") == release("1.0") == release("1") == (1,)
    assert release("2024.2.0") == release("2024.2")
    assert release("1.4.1.post1") == (1, 4, 1) and release("2.0rc1") == (2,)
    assert release("1.26.4") != release("1.26")
