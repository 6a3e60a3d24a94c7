"""A workspace with a training dataset, a model registered from it, and request-log
chunks written by the server's own table builder and the store's chunk writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import reprise
from reprise.registry import package_model, promote, register_package
from reprise.serve._reqlog import _Record, build_table
from reprise.store._request_log import write_request_chunk


def train_frame(n: int = 4000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n),
                      "plan": rng.choice(["basic", "pro", "team"], n, p=[0.6, 0.3, 0.1])})
    x["y"] = ((x["a"] + x["b"] + rng.normal(0, 0.5, n)) > 0).astype(int)
    return x


def setup_model(root: Path, *, accuracy: float | None = None,
                wide: bool = False) -> tuple[Any, Any]:
    """``churn`` version 1 (logistic regression on a, b) promoted to production; the
    training rows are dataset ``train@1``. ``accuracy``: the card's value (default: the
    model's own accuracy on its training rows). ``wide``: the inputs are a, b, a text
    column ``plan`` (one-hot encoded by the package's preprocessing) and a constant
    ``const``; the returned model is then the fitted pipeline."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder

    ws = reprise.init(root)
    frame = train_frame()
    frame["const"] = 1.0
    frame.to_csv(root / "train.csv", index=False)
    reprise.add_dataset("train", root / "train.csv", workspace=ws)
    x = frame[["a", "b", "plan", "const"] if wide else ["a", "b"]]
    pre = None
    if wide:
        pre = ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), ["plan"])],
                                remainder="passthrough").fit(x)
    lr = LogisticRegression().fit(x if pre is None else pre.transform(x), frame["y"])
    model: Any = lr if pre is None else Pipeline([("pre", pre), ("lr", lr)])
    acc = float((model.predict(x) == frame["y"]).mean()) if accuracy is None else accuracy
    evaluation = {"metrics": {"accuracy": {"value": acc}},
                  "gates": {"passed": True, "results": []}}
    register_package("churn", package_model(lr, sample=x, evaluation=evaluation,
                                            preprocessing=pre), workspace=ws)
    promote("churn", 1, "production", workspace=ws)
    return ws, model


def traffic(n: int, *, seed: int = 1, shift: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.normal(shift, 1.0, n), "b": rng.normal(size=n)})


def log_traffic(ws: Any, model: Any, frame: pd.DataFrame, *, at: float = 1000.0,
                per_request: int = 10, version: int = 1, prefix: str = "r",
                outputs: bool = True, drop: tuple[str, ...] = ()) -> list[str]:
    """Log ``frame`` as requests of ``per_request`` rows, one second apart, in one chunk;
    returns the request ids."""
    records, ids = [], []
    for k, i in enumerate(range(0, len(frame), per_request)):
        part = frame.iloc[i:i + per_request]
        inputs = {c: part[c].to_numpy() for c in part.columns if c not in drop}
        outs: dict[str, Any] = {}
        if outputs:
            xs = part[list(model.feature_names_in_)]
            outs = {"prediction": model.predict(xs), "probabilities": model.predict_proba(xs)}
        rid = f"{prefix}{at}-{k}"
        ids.append(rid)
        records.append(_Record("churn", version, rid, at + k, 1.0, len(part), inputs, outs))
    table = build_table(records)
    write_request_chunk(ws, table, name="churn", version=version, server="s",
                        first_at=records[0].at, last_at=records[-1].at,
                        requests=len(records))
    return ids
