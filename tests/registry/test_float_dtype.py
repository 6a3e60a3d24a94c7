"""Which packages compute in float32: a server checks inputs as the model will see them
(issue 20, item 6)."""

from __future__ import annotations

from typing import Any


def test_a_package_says_which_models_compute_in_float32() -> None:
    from types import SimpleNamespace

    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from reprise.registry._api import float_dtype

    def pkg(flavor: str, model: Any) -> Any:
        return SimpleNamespace(flavor=flavor, model=model)
    assert float_dtype(pkg("torch", None)) == "float32"
    assert float_dtype(pkg("sklearn", RandomForestClassifier())) == "float32"
    assert float_dtype(pkg("sklearn", make_pipeline(StandardScaler(),
                                                    RandomForestClassifier()))) == "float32"
    assert float_dtype(pkg("sklearn", LogisticRegression())) == "float64"
