"""``data add`` on the columns real exports have: ID columns beyond the exact limits and
64-bit integers beyond float64's 2**53 (issue 22, items 1 and 2), end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import reprise
from reprise.data import _sketches, add_dataset


@pytest.fixture
def ws(tmp_path: Path) -> Any:
    return reprise.init(tmp_path)


def test_data_add_of_an_id_column_beyond_the_exact_limit(ws: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sketches, "DISTINCT_CAP", 500)
    monkeypatch.setattr(_sketches, "MG_CAPACITY", 50)
    n = 6000
    t = pa.table({"id": pa.array([f"order-{i:06d}" for i in range(n)]),
                  "plan": pa.array(["basic", "pro", "team"] * (n // 3))})
    res = add_dataset("orders", t, workspace=ws, batch_rows=700)
    cols = res.record.profile["columns"]
    assert res.record.rows == n
    assert cols["id"]["distinct_exact"] is False and abs(cols["id"]["distinct"] - n) < 0.2 * n
    assert cols["id"]["top"] == []
    assert cols["plan"]["distinct"] == 3 and cols["plan"]["top_exact"] is True
