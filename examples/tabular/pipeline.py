"""A small but realistic tabular pipeline on scikit-learn's breast-cancer data
(shipped with scikit-learn, no download), read from the registered, validated
dataset version ``cancer@latest``: load -> validate -> split -> featurize -> train a
logistic regression (scikit-learn, stored with skops) and an MLP (PyTorch, trained with
reprise.train.Trainer, stored in safetensors) -> evaluate both (intervals, slices, quality
gates, HTML reports) -> package the MLP with its fitted scaler for the registry.

    reprise data add cancer data/cancer.csv --schema schema.py:schema
    reprise tune pipeline.py:tabular --space space.yaml --metric train_mlp/best_val_loss
    reprise run pipeline.py:tabular -p C=0.5 -p lr=... -p hidden=...

``broken`` is the demo's deliberately bad model, for its rollback act: a real, packaged
scikit-learn estimator that answers the most frequent class for every row.

    reprise run pipeline.py:broken
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from features import fit_scaler  # a helper module of this project
from schema import schema  # the dataset's pandera schema, also a module of this project

import reprise
from reprise import Dataset, step
from reprise.registry import ModelPackage


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
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any]:
    features = [c for c in train.columns if c not in ("id", "target")]
    scaler = fit_scaler(train[features])  # stored with skops; packaged with the model
    return (scaler.transform(train[features]), train["target"].to_numpy(),
            scaler.transform(test[features]), test["target"].to_numpy(), scaler)


@step
def train_model(x: np.ndarray, y: np.ndarray, C: float, max_iter: int) -> Any:
    from sklearn.linear_model import LogisticRegression

    # fit time and sample count are logged; the estimator is stored with skops (no pickle)
    model = reprise.train.fit_estimator(LogisticRegression(C=C, max_iter=max_iter), x, y)
    reprise.log_metric("train_accuracy", float(model.score(x, y)))
    return model


@step
def train_mlp(x: np.ndarray, y: np.ndarray, epochs: int, lr: float, hidden: int) -> Any:
    import torch
    from models import make_mlp  # a module of this project

    from reprise.train import EarlyStopping, Trainer

    # the table is tiny: the Trainer keeps it in memory as tensors, and a batch is one
    # gather per tensor (no per-row Dataset indexing and collation to wait for)
    table = pd.DataFrame(x.astype(np.float32), columns=[f"x{i}" for i in range(x.shape[1])])
    table["label"] = y.astype(np.int64)
    n_val = len(x) // 5  # the first fifth of the training rows for early stopping
    model = make_mlp(x.shape[1], hidden=hidden)
    trainer = Trainer(model, lambda p: torch.optim.AdamW(p, lr=lr),
                      loss=torch.nn.functional.cross_entropy, max_epochs=epochs,
                      early_stopping=EarlyStopping(patience=5), deterministic=True, seed=0,
                      device="auto", log_every=10, batch_size=32, label="label")
    # inside `reprise tune`, validations feed the pruner
    result = trainer.fit(table.iloc[n_val:], table.iloc[:n_val])
    reprise.log_metric("best_val_loss", min(v["val_loss"] for v in result.validations))
    return model.cpu().eval()


# what a model must reach on the test split before it may go further (registration)
GATES = {"roc_auc": ">= 0.95", "accuracy": ">= 0.90", "worst_slice.accuracy": ">= 0.80"}


@step
def evaluate(model: Any, mlp: Any, x: np.ndarray, y: np.ndarray, test: pd.DataFrame) -> dict:
    import torch

    from reprise.evaluate import evaluate as score

    with torch.no_grad():
        mlp_proba = torch.softmax(mlp(torch.tensor(x, dtype=torch.float32)), dim=1)[:, 1]
    # slices over two raw measurements (binned by quartile); reports: evaluation-<name>.html
    columns = test[["mean_radius", "mean_texture"]]
    results = {}
    for name, proba in (("logreg", model.predict_proba(x)[:, 1]), ("mlp", mlp_proba.numpy())):
        ev = score(X=columns, y=y, y_proba=proba, slices=list(columns), gates=GATES,
                   name=name, seed=0)
        results[name] = dict(ev)  # metrics with intervals, slices, gates: the model card's
    return results


@step
def package(mlp: Any, scaler: Any, train: pd.DataFrame, evaluation: dict) -> ModelPackage:
    """The MLP with its fitted scaler, signature (from the raw training columns), example
    rows and card (the evaluation above: promotion needs its gates passed)."""
    return reprise.registry.package_model(
        mlp, sample=train[list(scaler.feature_names_in_)], target=train["target"],
        preprocessing=scaler, evaluation=evaluation["mlp"],
        description="MLP on the breast-cancer measurements (tabular demo)")


CANCER = Dataset("cancer@latest")  # the newest registered version, resolved once per run


@reprise.pipeline
def tabular(data: Dataset = CANCER, C: float = 1.0,
            test_fraction: float = 0.25, max_iter: int = 500, epochs: int = 30,
            lr: float = 0.003, hidden: int = 32):
    frame = validate(load(data))
    train, test = split(frame, test_fraction)
    x_train, y_train, x_test, y_test, scaler = featurize(train, test)
    model = train_model(x_train, y_train, C, max_iter)
    mlp = train_mlp(x_train, y_train, epochs, lr, hidden)
    evaluation = evaluate(model, mlp, x_test, y_test, test)
    return package(mlp, scaler, train, evaluation)


@step
def train_constant(x: np.ndarray, y: np.ndarray) -> Any:
    """A deliberately broken model: scikit-learn's DummyClassifier answers the training
    data's most frequent class (benign) for every row, whatever its measurements."""
    from sklearn.dummy import DummyClassifier

    return reprise.train.fit_estimator(DummyClassifier(strategy="most_frequent"), x, y)


@step
def evaluate_constant(model: Any, x: np.ndarray, y: np.ndarray, test: pd.DataFrame) -> dict:
    """The same evaluation and gates as the real models. It fails them (ROC AUC 0.5), and
    the failed evaluation goes on its card, so promoting it needs --force."""
    from reprise.evaluate import GateFailedError
    from reprise.evaluate import evaluate as score

    columns = test[["mean_radius", "mean_texture"]]
    try:
        ev = score(X=columns, y=y, y_proba=model.predict_proba(x)[:, 1],
                   slices=list(columns), gates=GATES, name="constant", seed=0)
    except GateFailedError as exc:  # expected: keep the evaluation, with its failed gates
        ev = exc.evaluation
    return dict(ev)


@step
def package_constant(model: Any, scaler: Any, train: pd.DataFrame,
                     evaluation: dict) -> ModelPackage:
    """Packaged exactly like the MLP (same scaler, signature and example rows), so a
    rollout accepts its inputs and its warm-up: only its answers are wrong."""
    return reprise.registry.package_model(
        model, sample=train[list(scaler.feature_names_in_)], target=train["target"],
        preprocessing=scaler, evaluation=evaluation,
        description="Deliberately broken: answers one class for every row (demo)")


@reprise.pipeline
def broken(data: Dataset = CANCER, test_fraction: float = 0.25):
    """The demo's bad candidate; its data steps are the ``tabular`` pipeline's (cached)."""
    frame = validate(load(data))
    train, test = split(frame, test_fraction)
    x_train, y_train, x_test, y_test, scaler = featurize(train, test)
    model = train_constant(x_train, y_train)
    evaluation = evaluate_constant(model, x_test, y_test, test)
    return package_constant(model, scaler, train, evaluation)
