"""Predicting with a package: validated columns -> preprocessing -> model -> outputs.

The input becomes what the model was fitted on (``input_format``): a DataFrame
with the signature's column names (estimators fitted on DataFrames check them),
a 2-D float array in signature order, or one stacked tensor. Classifiers answer
``prediction`` (the class label) and ``probabilities`` (one per class, in the
signature's class order); regressors answer ``prediction``. Outputs are numpy
arrays: converting a million rows to Python lists would cost more than predicting
them (callers that write JSON convert the rows they send).
"""

from __future__ import annotations

from typing import Any

__all__ = ["predict_columns"]


def predict_columns(pkg: Any, columns: dict[str, Any]) -> dict[str, Any]:
    x = _inputs(pkg, columns)
    if pkg.preprocessing is not None:
        x = pkg.preprocessing.transform(x)
    if pkg.flavor == "sklearn":
        return _sklearn(pkg, x)
    return _torch(pkg, x)


def _inputs(pkg: Any, columns: dict[str, Any]) -> Any:
    import numpy as np

    names = pkg.signature.names
    if pkg.input_format == "frame":
        import pandas as pd

        return pd.DataFrame({n: columns[n] for n in names}, columns=names)
    if pkg.input_format == "tensor":
        return np.asarray(columns[names[0]], dtype=np.float32)
    return np.column_stack([np.asarray(columns[n], dtype=np.float64) for n in names])


def _sklearn(pkg: Any, x: Any) -> dict[str, Any]:
    import numpy as np

    model = pkg.model
    task = pkg.signature.task
    if task == "regression" or not hasattr(model, "predict_proba"):
        return {"prediction": np.asarray(model.predict(x))}
    proba = np.asarray(model.predict_proba(x), dtype=np.float64)
    labels = np.asarray(model.classes_)[proba.argmax(axis=1)]
    return {"prediction": labels, "probabilities": proba}


def _torch(pkg: Any, x: Any) -> dict[str, Any]:
    import numpy as np
    import torch

    with torch.no_grad():
        out = pkg.model(torch.as_tensor(np.asarray(x), dtype=torch.float32))
    if pkg.signature.task == "regression":
        return {"prediction": out.reshape(out.shape[0], -1)[:, 0].double().numpy()}
    proba = torch.softmax(out.double(), dim=1).numpy()
    classes = np.asarray(pkg.signature.classes)
    return {"prediction": classes[proba.argmax(axis=1)], "probabilities": proba}
