"""How a served version's batches reach its model: a scikit-learn package on a float
matrix takes the checked lists as they are (no per-column arrays first) and answers
exactly what the package answers on the converted columns, nulls included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import reprise
from reprise.registry import RegistrySource, package_model, promote, register_package
from tests.serve.fakes import run, serving


def _served(tmp_path: Path, model: Any, sample: Any) -> Any:
    ws = reprise.init(tmp_path / "ws")
    version = register_package("m", package_model(model, sample=sample), workspace=ws).version
    promote("m", version, "production", workspace=ws, force=True, reason="test")
    return ws


def _frame(n: int = 300) -> Any:
    import pandas as pd

    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": rng.normal(size=n), "b": rng.integers(0, 5, n),
                          "c": rng.normal(size=n)})
    frame.loc[::7, "c"] = np.nan  # a nullable input
    return frame


def test_a_float_matrix_package_takes_the_checked_lists(tmp_path: Path) -> None:
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    frame = _frame()
    y = (frame["a"] + frame["b"] > 2).astype(int)
    model = make_pipeline(SimpleImputer(), LogisticRegression()).fit(frame.to_numpy(), y)
    ws = _served(tmp_path, model, frame)
    rows = [{"a": 0.5, "b": 3, "c": None}, {"a": -1.25, "b": 0, "c": 2.0},
            {"a": 2.0, "b": 4, "c": 1e-300}]

    async def main() -> None:
        async with serving(RegistrySource(ws), ["m@production"]) as (client, app):
            served = app.state.reprise.table.by_ref["m@production"]
            assert served.servable.takes_lists and served.batcher._convert is dict
            got = [(await client.post("/v1/models/m/predict", json=[row])).json()
                   for row in rows]  # one by one
            together = (await client.post("/v1/models/m/predict", json=rows)).json()
            checked = served.signature.check_records(rows)
            expected = served.servable.predict(served.signature.to_arrays(checked.columns))
            want = expected["probabilities"].tolist()
            assert [g["predictions"][0]["probabilities"] for g in got] == want
            assert [p["probabilities"] for p in together["predictions"]] == want
            assert [p["prediction"] for p in together["predictions"]] == \
                expected["prediction"].tolist()

    run(main())


def test_other_packages_get_arrays(tmp_path: Path) -> None:
    from sklearn.linear_model import LogisticRegression

    frame = _frame().fillna(0.0)
    y = (frame["a"] > 0).astype(int)
    ws = _served(tmp_path, LogisticRegression().fit(frame, y), frame)  # names: a frame

    async def main() -> None:
        async with serving(RegistrySource(ws), ["m@production"]) as (client, app):
            served = app.state.reprise.table.by_ref["m@production"]
            assert not served.servable.takes_lists and served.batcher._convert is not dict
            r = await client.post("/v1/models/m/predict", json=[{"a": 1.0, "b": 2, "c": 0.5}])
            assert r.status_code == 200, r.text

    run(main())
