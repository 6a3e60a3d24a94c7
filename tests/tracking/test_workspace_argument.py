"""``workspace=`` may be a path wherever the public API takes a workspace (issue 22.4:
``add_dataset(..., workspace="path")`` failed with AttributeError)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core.errors import UserError
from reprise.data import Dataset, add_dataset, get_dataset, list_datasets


@pytest.fixture
def ws(tmp_path: Path) -> Any:
    return reprise.init(tmp_path / "ws")


def test_workspace_may_be_given_as_a_path(ws: Any, tmp_path: Path) -> None:
    path = tmp_path / "u.csv"
    path.write_text("id\n1\n2\n")
    for root in (str(ws.root), Path(ws.root), Path(ws.root) / "sub"):
        Path(root).mkdir(exist_ok=True)
        add_dataset("u", path, workspace=root)
    assert [r.ref for r in list_datasets(workspace=str(ws.root))] == ["u@1"]
    assert get_dataset("u", workspace=ws.root).rows == 2
    assert Dataset("u@1", workspace=str(ws.root)).to_pandas()["id"].tolist() == [1, 2]
    with reprise.start_run("r", workspace=str(ws.root)) as run:
        reprise.log_metric("m", 1.0)
    assert ws.metadata.get_run(run.id).name == "r"
    from reprise.registry import list_models

    assert list_models(workspace=str(ws.root)) == []
    with pytest.raises(UserError, match="workspace must be a Workspace, a path or None"):
        add_dataset("u", path, workspace=42)
