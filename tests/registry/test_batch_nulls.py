"""Batch prediction reads an input file with the missing-value spellings of the model's
training data (recorded in its signature), unless told otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core.errors import UserError
from reprise.data import Dataset, add_dataset
from reprise.registry import Signature, package_model, register_package
from reprise.registry._batch import predict_file


@pytest.fixture
def ws(tmp_path: Path) -> Any:
    return reprise.init(tmp_path)


def trained(ws: Any) -> Any:
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    rows = [f"{i},{'-' if i % 5 == 0 else i / 10},{(i * 7) % 11},{i % 2}" for i in range(40)]
    path = Path(ws.root) / "train.csv"
    path.write_text("id,a,b,y\n" + "\n".join(rows) + "\n")
    add_dataset("pts", path, workspace=ws, na_values=["-", ""])
    frame = Dataset("pts", workspace=ws).to_pandas()
    assert frame["a"].isna().sum() == 8
    features = frame[["a", "b"]]
    model = make_pipeline(SimpleImputer(), LogisticRegression()).fit(features, frame["y"])
    return package_model(model, sample=features)


def test_the_signature_records_the_training_spellings(ws: Any) -> None:
    pkg = trained(ws)
    assert pkg.signature.na_values == ["", "-"]
    assert Signature.from_dict(pkg.signature.to_dict()).na_values == ["", "-"]
    assert pkg.signature.with_policy(extra_columns="ignore").na_values == ["", "-"]


def test_batch_prediction_uses_them_unless_overridden(ws: Any, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    register_package("pts", trained(ws), workspace=ws)
    src = tmp_path / "in.csv"
    src.write_text("id,a,b\n1,-,3\n2,0.5,\n3,NA,2\n")
    with pytest.raises(UserError, match="a: expected a number"):  # "NA" is text here
        predict_file("pts:1", str(src), tmp_path / "out.parquet", workspace=ws)
    src.write_text("id,a,b\n1,-,3\n2,0.5,4\n3,0.1,2\n")
    res = predict_file("pts:1", str(src), tmp_path / "out.parquet", workspace=ws)
    assert res.rows == 3
    src.write_text("id,a,b\n1,NA,3\n2,0.5,4\n3,null,2\n")
    res = predict_file("pts:1", str(src), tmp_path / "out.parquet", workspace=ws,
                       na_values=["NA", "null"])
    assert res.rows == 3
    assert pq.read_table(tmp_path / "out.parquet")["prediction"].null_count == 0


def test_served_json_null_is_the_null_and_strings_stay_strings() -> None:
    """The server's decision (README, serve/_v1.py): JSON null is missing; "NA" is a
    string, counted as a category never seen in training."""
    import pandas as pd

    from reprise.registry import infer_signature

    sig = infer_signature(pd.DataFrame({"city": ["NAPLES", None, "Rome"]}))
    checked = sig.validate_columns({"city": [None, "NA", "Rome"]})
    assert checked.ok and checked.out_of_range == {"city": 1}
    assert checked.columns["city"].tolist() == [None, "NA", "Rome"]


def test_an_input_whose_types_widen_past_the_first_block_is_predicted_whole(
        ws: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reprise.registry import _batch

    monkeypatch.setattr(_batch, "_BLOCK", 1 << 12)
    register_package("pts", trained(ws), workspace=ws)
    src = tmp_path / "in.csv"
    rows = [f"{i},,{i % 11}" for i in range(2000)] + ["2000,0.5,3"]  # a: empty until its 0.5
    src.write_text("id,a,b\n" + "\n".join(rows) + "\n")
    assert src.stat().st_size > 3 * (1 << 12)
    res = predict_file("pts:1", str(src), tmp_path / "out.parquet", workspace=ws)
    assert res.rows == 2001
