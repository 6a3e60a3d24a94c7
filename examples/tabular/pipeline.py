"""A small but realistic tabular pipeline on scikit-learn's breast-cancer data
(shipped with scikit-learn, no download), read from the registered, validated
dataset version ``cancer@latest``: load -> validate -> split -> featurize -> train
-> evaluate.

    reprise data add cancer data/cancer.csv --schema schema.py:schema
    reprise run pipeline.py:tabular -p C=0.5
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from features import fit_scaler, standardize  # a helper module of this project
from schema import schema  # the dataset's pandera schema, also a module of this project

import reprise
from reprise import Dataset, step


@step
def load(data: Dataset) -> pd.DataFrame:
    return data.to_pandas()


@step
def validate(frame: pd.DataFrame) -> pd.DataFrame:
    """Re-check the contract; a failure stops the pipeline before training."""
    reprise.data.validate_frame(frame, schema)
    reprise.log_metric("rows", len(frame))
    return frame


@step
def split(frame: pd.DataFrame, test_fraction: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    # by hashing each row's id: a row keeps its split when rows are added, on every machine
    parts = reprise.split(frame, by="id", stratify="target", seed=0,
                          fractions={"train": 1 - test_fraction, "test": test_fraction})
    return parts["train"].reset_index(drop=True), parts["test"].reset_index(drop=True)


@step
def featurize(train: pd.DataFrame, test: pd.DataFrame
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    features = [c for c in train.columns if c not in ("id", "target")]
    scaler = fit_scaler(train[features].to_numpy())
    x_train = standardize(train[features].to_numpy(), scaler)
    x_test = standardize(test[features].to_numpy(), scaler)
    return (x_train, train["target"].to_numpy(), x_test, test["target"].to_numpy(),
            {"features": features, **scaler})


@step
def train_model(x: np.ndarray, y: np.ndarray, C: float, max_iter: int) -> dict:
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=C, max_iter=max_iter)
    model.fit(x, y)
    reprise.log_metric("train_accuracy", float(model.score(x, y)))
    # the fitted parameters, as plain data (no pickle)
    return {"coef": model.coef_.ravel().tolist(), "intercept": float(model.intercept_[0])}


@step
def evaluate(model: dict, x: np.ndarray, y: np.ndarray) -> dict:
    from sklearn.metrics import accuracy_score, f1_score, roc_auc_score

    logits = x @ np.asarray(model["coef"]) + model["intercept"]
    proba = 1.0 / (1.0 + np.exp(-logits))
    pred = (proba >= 0.5).astype(int)
    metrics = {"accuracy": float(accuracy_score(y, pred)), "f1": float(f1_score(y, pred)),
               "roc_auc": float(roc_auc_score(y, proba))}
    for k, v in metrics.items():
        reprise.log_metric(k, v)
    return metrics


CANCER = Dataset("cancer@latest")  # the newest registered version, resolved once per run


@reprise.pipeline
def tabular(data: Dataset = CANCER, C: float = 1.0,
            test_fraction: float = 0.25, max_iter: int = 500):
    frame = validate(load(data))
    train, test = split(frame, test_fraction)
    x_train, y_train, x_test, y_test, _prep = featurize(train, test)
    model = train_model(x_train, y_train, C, max_iter)
    return evaluate(model, x_test, y_test)
