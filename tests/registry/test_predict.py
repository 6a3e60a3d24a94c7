"""Predicting with a package's scikit-learn model: scikit-learn's own finiteness check is
skipped only where it is known to pass (a float input with no NaN or infinity, checked
here, into a single estimator), so no answer and no error changes."""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import sklearn
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from reprise.registry._predict import _sklearn


class Recording(LogisticRegression):
    """A LogisticRegression noting whether scikit-learn assumed finite input for it."""

    def decision_function(self, X: Any) -> Any:  # predict_proba's first step too
        seen.append(sklearn.get_config()["assume_finite"])
        return super().decision_function(X)


seen: list[bool] = []


def _fitted(model: Any) -> tuple[Any, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4))
    model.fit(x, (x[:, 0] - x[:, 1] > 0).astype(int))
    return model, x


def _pkg(model: Any) -> Any:
    return SimpleNamespace(model=model, signature=SimpleNamespace(task="binary"))


def test_a_finite_float_input_skips_the_check_and_answers_the_same() -> None:
    model, x = _fitted(Recording())
    seen.clear()
    out = _sklearn(_pkg(model), x[:3])
    assert seen == [True]
    assert sklearn.get_config()["assume_finite"] is False  # restored after the call
    expected = LogisticRegression.predict_proba(model, x[:3])
    assert np.array_equal(out["probabilities"], expected)
    assert out["prediction"].tolist() == model.classes_[expected.argmax(axis=1)].tolist()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_input_keeps_scikit_learns_check_and_its_error(bad: float) -> None:
    model, x = _fitted(Recording())
    rows = x[:3].copy()
    rows[1, 2] = bad
    seen.clear()
    with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
        _sklearn(_pkg(model), rows)
    assert seen == [False]


def test_a_pipeline_keeps_every_steps_check() -> None:
    """Its later steps see the earlier steps' outputs, which the package does not check."""
    pipe, x = _fitted(make_pipeline(StandardScaler(), Recording()))
    seen.clear()
    out = _sklearn(_pkg(pipe), x[:3])
    assert seen == [False]
    assert np.array_equal(out["probabilities"], pipe.predict_proba(x[:3]))


def test_a_non_float_input_keeps_the_check() -> None:
    model, _ = _fitted(Recording())
    seen.clear()
    _sklearn(_pkg(model), np.array([[1, 0, 2, 3]]))
    assert seen == [False]


def test_a_meta_estimator_keeps_every_check() -> None:
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.ensemble import StackingClassifier

    for meta in (CalibratedClassifierCV(Recording(), cv=2),
                 StackingClassifier([("lr", Recording())], final_estimator=Recording())):
        model, x = _fitted(meta)
        seen.clear()
        _sklearn(_pkg(model), x[:3])
        assert seen and not any(seen)


def test_array_inputs_become_the_same_matrix_as_column_stack() -> None:
    from reprise.registry._predict import _inputs

    names = ["a", "b", "c"]
    pkg = SimpleNamespace(input_format="array", signature=SimpleNamespace(names=names))
    columns = {"a": np.array([1.5, -2.0]), "b": np.array([3, 4]), "c": np.array([0.1, 1e300])}
    x = _inputs(pkg, columns)
    expected = np.column_stack([np.asarray(columns[n], dtype=np.float64) for n in names])
    assert x.dtype == np.float64 and x.flags.c_contiguous
    assert np.array_equal(x, expected)
    shaped = {"a": np.array([1.0, 2.0]), "b": np.array([[1.0, 2.0], [3.0, 4.0]]),
              "c": np.array([5.0, 6.0])}  # a column of rows: column_stack's own way
    assert np.array_equal(_inputs(pkg, shaped), np.column_stack(
        [np.asarray(shaped[n], dtype=np.float64) for n in names]))


def test_checked_lists_become_the_matrix_their_arrays_would() -> None:
    """A server hands a scikit-learn package its checked lists (``takes_lists``): the
    matrix is the one ``Signature.to_arrays`` and column_stack make, nulls as NaN."""
    from reprise.registry import Field, Signature
    from reprise.registry._predict import _inputs

    sig = Signature(inputs=[Field("a", "float", nullable=True), Field("b", "int"),
                            Field("c", "bool"), Field("d", "int", nullable=True)],
                    outputs=[Field("prediction", "int")])
    pkg = SimpleNamespace(input_format="array", signature=sig)
    columns = {"a": [1.5, None, 1e300], "b": [3, -(2**62), 2**53 + 1], "c": [True, False, True],
               "d": [None, 7, 0]}
    x = _inputs(pkg, columns)
    expected = np.column_stack([np.asarray(v, dtype=np.float64)
                                for v in sig.to_arrays(columns).values()])
    assert x.dtype == np.float64 and x.flags.c_contiguous
    assert np.array_equal(x, expected, equal_nan=True)
    rows = {"a": [1.0, 2.0], "b": [[1.0, 2.0], [3.0, 4.0]], "c": [5.0, 6.0], "d": [0, 1]}
    assert _inputs(pkg, rows).shape == (2, 5)  # a column of rows: column_stack's own way


def test_a_value_beyond_float32_keeps_the_check_of_a_float32_estimator() -> None:
    """Trees cast to float32, where 1e39 is infinity: scikit-learn's error stays."""
    from sklearn.tree import DecisionTreeClassifier

    model, x = _fitted(DecisionTreeClassifier(random_state=0))
    rows = x[:2].copy()
    rows[0, 1] = 1e39  # finite as float64
    with warnings.catch_warnings():  # numpy's own warning as scikit-learn casts it
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError, match="infinity or a value too large"):
            _sklearn(_pkg(model), rows)
    assert _sklearn(_pkg(model), x[:2])["prediction"].tolist() == model.predict(x[:2]).tolist()


def test_a_meta_estimator_building_its_own_inner_one_keeps_the_check() -> None:
    from sklearn.ensemble import AdaBoostClassifier, BaggingClassifier

    from reprise.registry._predict import _single

    for meta in (AdaBoostClassifier(n_estimators=3), BaggingClassifier(n_estimators=2)):
        model, _ = _fitted(meta)  # estimator=None: a tree made inside
        assert not _single(model)
    assert _single(_fitted(LogisticRegression())[0])
