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

import weakref
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
    cols = [columns[n] for n in names]
    if all(type(c) is list or getattr(c, "ndim", 0) == 1 for c in cols):
        # one conversion of every column (1-D arrays, or a server's checked lists, None
        # for a null becoming NaN as Signature.to_arrays makes it) and one transposing
        # copy: ~3 us against ~10 for column_stack, and ~20 more for converting lists
        # column by column first; paid by every micro-batch of a server. The same
        # C-ordered float64 matrix
        try:
            x = np.array(cols, dtype=np.float64)
        except ValueError:  # a column of rows (a shaped input): column_stack's way
            x = None
        if x is not None and x.ndim == 2:
            return np.ascontiguousarray(x.T)
    return np.column_stack([np.asarray(c, dtype=np.float64) for c in cols])


def _sklearn(pkg: Any, x: Any) -> dict[str, Any]:
    import numpy as np

    model = pkg.model
    task = pkg.signature.task
    finite = _known_finite(model, x)
    if finite:  # this thread's setting (scikit-learn's configuration is per thread)
        import sklearn

        before = sklearn.get_config()["assume_finite"]
        sklearn.set_config(assume_finite=True)
    try:
        if task == "regression" or not hasattr(model, "predict_proba"):
            return {"prediction": np.asarray(model.predict(x))}
        proba = np.asarray(model.predict_proba(x), dtype=np.float64)
    finally:
        if finite:
            sklearn.set_config(assume_finite=before)
    labels = np.asarray(model.classes_)[proba.argmax(axis=1)]
    return {"prediction": labels, "probabilities": proba}


def _known_finite(model: Any, x: Any) -> bool:
    """Whether scikit-learn's own finiteness check must pass, so that the call may run
    with ``assume_finite``: ``x`` is a float array whose every value lies within
    float32's range (so no NaN or infinity, and none made by an estimator that casts to
    float32, as trees do) and ``model`` holds no other estimator. Skipping the check
    then changes no answer and no error, and saves ~5 us of a ~93 us call (a served
    request's few rows pay it in full, once per micro-batch; ``set_config`` twice costs
    0.6 us, ``config_context`` 5). Not for a Pipeline or another meta-estimator, even
    one building its own inner estimator (``estimator=None``): the estimators inside
    may see what earlier ones computed, which this does not check."""
    import numpy as np

    if not (isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.size
            and _single(model)):
        return False
    return bool(-_F32_MAX <= x.min() and x.max() <= _F32_MAX)  # NaN: both False


_F32_MAX = 3.4028234663852886e38
# parameters naming an inner estimator, even when None (the meta-estimator builds one)
_INNER = frozenset({"estimator", "base_estimator", "final_estimator", "estimators",
                    "steps", "transformers", "transformer_list"})
_SINGLE: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _single(model: Any) -> bool:
    """Whether ``model`` holds no other estimator among its parameters (a Pipeline's
    steps, a stacking's estimators, a calibration's base...); found once per model."""
    try:
        return _SINGLE[model]
    except KeyError:
        pass
    except TypeError:  # not weakly referenceable: asked each time (rare)
        return _holds_none(model)
    single = _SINGLE[model] = _holds_none(model)
    return single


def _holds_none(model: Any) -> bool:
    try:
        params = model.get_params(deep=False)
    except Exception:  # not a scikit-learn estimator as expected: keep every check
        return False
    return not any(k in _INNER or _estimator_in(v) for k, v in params.items())


def _estimator_in(value: Any) -> bool:
    if hasattr(value, "fit"):
        return True
    if isinstance(value, list | tuple):
        return any(_estimator_in(v) for v in value)
    return False


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
