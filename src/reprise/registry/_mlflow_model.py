"""The MLflow pyfunc wrapper of an exported Reprise package (``reprise export mlflow``).

MLflow stores this file in the model directory ("models from code") and executes it
when it loads the model; nothing is pickled: the one artifact is the package folder,
read and verified by :func:`reprise.registry.read_package` (skops, safetensors). Only
``reprise export mlflow`` and MLflow import it (it imports mlflow).
"""

from __future__ import annotations

from typing import Any

import mlflow.models
import mlflow.pyfunc


class ReprisePackageModel(mlflow.pyfunc.PythonModel):  # type: ignore[name-defined,misc]
    """Predicts with a Reprise model package: the same validation and outputs as
    ``ModelPackage.predict_records`` (a DataFrame in, a DataFrame of outputs out)."""

    def load_context(self, context: Any) -> None:
        from reprise.registry import read_package

        self.package = read_package(context.artifacts["package"])

    # no annotations: MLflow would read them as an input schema
    def predict(self, context, model_input, params=None):  # type: ignore[no-untyped-def]
        import pandas as pd

        if isinstance(model_input, pd.DataFrame):
            records = model_input.to_dict(orient="records")
        elif isinstance(model_input, dict):
            records = pd.DataFrame(model_input).to_dict(orient="records")
        else:
            records = list(model_input)
        return pd.DataFrame(self.package.predict_records(records))


mlflow.models.set_model(ReprisePackageModel())
