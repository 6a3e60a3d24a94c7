"""Predictions from a fitted model: scikit-learn estimators and pipelines, anything
with ``predict``/``predict_proba``, and (optionally) a ``torch.nn.Module``."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from reprise.core.errors import UserError
from reprise.evaluate._inputs import Array

__all__ = ["Predictions", "kind_of", "predict"]


@dataclass(frozen=True)
class Predictions:
    """What a model said about X; ``labels`` is its class order (``classes_``) if known."""

    y_pred: Array | None
    y_proba: Array | None
    labels: list[Any] | None
    task: str


def predict(model: Any, X: Any, task: str = "auto") -> Predictions:
    """Run ``model`` on ``X``; probabilities when the model is a classifier that has them."""
    if X is None:
        raise UserError("a model was given but no X to predict on; pass X (and y).")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        return _predict_torch(model, X, task)
    if not callable(getattr(model, "predict", None)):
        raise UserError(f"cannot evaluate a {type(model).__qualname__}: it has no predict(). "
                        "Pass a fitted model (scikit-learn estimator, Pipeline, or an object "
                        "with predict/predict_proba), or y_pred=/y_proba= directly.")
    kind = task if task != "auto" else kind_of(model)
    try:
        y_pred = np.asarray(model.predict(X))
        proba = None
        if kind != "regression" and callable(getattr(model, "predict_proba", None)):
            proba = np.asarray(model.predict_proba(X), dtype=np.float64)
    except Exception as exc:
        if type(exc).__name__ == "NotFittedError":
            raise UserError(f"the {type(model).__qualname__} is not fitted; fit it first "
                            "(or evaluate its predictions with y_pred=).") from None
        raise
    classes = getattr(model, "classes_", None)
    labels = list(classes) if classes is not None and kind != "regression" else None
    return Predictions(y_pred=y_pred, y_proba=proba, labels=labels, task=kind)


def kind_of(model: Any) -> str:
    """"classification", "regression" or "auto" (let the targets decide)."""
    if "sklearn" in sys.modules:
        from sklearn.base import is_classifier, is_regressor

        try:
            if is_classifier(model):
                return "classification"
            if is_regressor(model):
                return "regression"
        except Exception:  # non-scikit-learn objects without tags: fall through
            pass
    return "classification" if callable(getattr(model, "predict_proba", None)) else "auto"


def _predict_torch(model: Any, X: Any, task: str) -> Predictions:
    """A module's outputs in eval mode: (n, k>=2) logits -> softmax probabilities;
    (n,) or (n, 1) -> predicted values (regression), or a sigmoid for a binary task."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            inputs = X if isinstance(X, torch.Tensor) else torch.as_tensor(np.asarray(X))
            first = next(model.parameters(), None)
            if first is not None:
                inputs = inputs.to(device=first.device, dtype=first.dtype)
            out = model(inputs).detach().to("cpu", torch.float64)
    finally:
        model.train(was_training)
    if out.ndim == 2 and out.shape[1] >= 2:
        if task == "regression":
            raise UserError(f"task='regression' but the module returns {out.shape[1]} outputs "
                            "per row; multi-output regression is not supported.")
        proba = torch.softmax(out, dim=1).numpy()
        return Predictions(y_pred=None, y_proba=proba, labels=None, task="classification")
    flat = out.reshape(-1).numpy()
    if task in ("classification", "binary"):
        return Predictions(y_pred=None, y_proba=1.0 / (1.0 + np.exp(-flat)), labels=None,
                           task="binary")
    return Predictions(y_pred=flat, y_proba=None, labels=None, task="regression")
