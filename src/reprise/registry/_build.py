"""Building a model package from a fitted model and what it was trained on."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from reprise.core.errors import UserError
from reprise.registry._infer import infer_signature
from reprise.registry._package import ModelPackage, PackageError
from reprise.registry._requirements import package_environment
from reprise.registry._signature import Field, Signature

__all__ = ["check_installed_classes", "package_model"]

_CARD_METRICS = 12  # headline metrics copied from an evaluation onto the card


def package_model(model: Any, *, sample: Any, target: Any = None, preprocessing: Any = None,
                  evaluation: Mapping[str, Any] | None = None, task: str | None = None,
                  classes: Sequence[Any] | None = None, example_rows: int = 3,
                  extra_columns: str = "reject", out_of_range: str = "flag",
                  description: str | None = None,
                  na_values: Sequence[str] | None = None) -> ModelPackage:
    """A :class:`ModelPackage` of a fitted ``model``.

    Args:
        model: a fitted scikit-learn estimator or Pipeline, or a ``torch.nn.Module``
            (built only from classes of installed packages, e.g. ``nn.Sequential``).
        sample: the raw training features (DataFrame, Arrow table or ``{name: array}``),
            before ``preprocessing``: the signature's columns, types, ranges and
            categories come from it, and the example rows.
        target: the training targets (gives a torch classifier its classes); when it is
            a named column (a pandas Series), its name goes on the card (``target``),
            which is how ``optimize`` finds the labels in a held-out table.
        preprocessing: the fitted scikit-learn transformer applied before the model
            (a scaler, a ColumnTransformer...), stored with the model so serving
            cannot drift from training.
        evaluation: a :class:`reprise.evaluate.Evaluation` (or its dict): metrics with
            intervals and the gates' outcome go on the card; promotion needs passed gates.
        task, classes: override what is inferred ("binary", "multiclass", "regression").
        extra_columns, out_of_range: the serving policy for unknown columns ("reject" or
            "ignore") and for values outside the training range ("flag" or "reject").
        na_values: the text read as a missing value in the training data's files, which
            batch prediction then reads input files with; by default the spellings of
            the dataset version ``sample`` came from (``Dataset.to_pandas()`` and
            ``to_arrow()`` carry them), else pandas' defaults.

    Example:
        >>> import pandas as pd
        >>> from sklearn.linear_model import LogisticRegression
        >>> X = pd.DataFrame({"a": [0.0, 1.0, 2.0, 3.0], "b": [1.0, 0.0, 1.0, 0.0]})
        >>> pkg = package_model(LogisticRegression().fit(X, [0, 0, 1, 1]), sample=X)
        >>> pkg.flavor, pkg.card["task"], pkg.predict_records([{"a": 2.5, "b": 1.0}])["prediction"]
        ('sklearn', 'binary', [1])
    """
    flavor = _flavor(model)
    if preprocessing is not None and not hasattr(preprocessing, "transform"):
        raise UserError(f"preprocessing must be a fitted scikit-learn transformer (with "
                        f"transform); got a {type(preprocessing).__name__}")
    if not isinstance(example_rows, int) or example_rows < 1:
        raise UserError(f"example_rows must be a positive integer; got {example_rows!r}")
    task, classes = _task(model, flavor, target, task, classes)
    outputs = _outputs(task, classes)
    signature = infer_signature(sample, outputs=outputs, task=task, classes=classes,
                                extra_columns=extra_columns, out_of_range=out_of_range)
    signature.na_values = _na_values(sample, na_values)
    input_format = _input_format(model, preprocessing, signature, flavor)
    environment, requirements = package_environment(model, preprocessing, flavor)
    pkg = ModelPackage(flavor=flavor, model=model, signature=signature,
                       input_format=input_format, preprocessing=preprocessing,
                       example=_example(sample, signature, example_rows),
                       card=_card(task, classes, evaluation, description,
                                  _target_name(target)),
                       evaluation=_plain(dict(evaluation)) if evaluation is not None else None,
                       environment=environment, requirements=requirements)
    try:  # the example must run, or the package could never be warmed up
        pkg.predict_records(pkg.example)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"the packaged model cannot predict its own example rows "
                        f"({type(exc).__name__}: {exc}); is `sample` the raw training "
                        "features, before preprocessing?") from None
    return pkg


def _na_values(sample: Any, given: Sequence[str] | None) -> list[str]:
    """The missing-value spellings of the training data: given, carried by the sample
    (pandas ``attrs`` or Arrow schema metadata), or the defaults."""
    import json

    from reprise.core._nulls import resolve_na_values

    if given is None:
        attrs = getattr(sample, "attrs", None)
        if isinstance(attrs, Mapping):
            given = attrs.get("reprise.na_values")
        metadata = getattr(getattr(sample, "schema", None), "metadata", None) or {}
        if given is None and b"reprise.na_values" in metadata:
            given = json.loads(metadata[b"reprise.na_values"])
    return list(resolve_na_values(given))


def _flavor(model: Any) -> str:
    from reprise.store._materializer import _instance_of

    if _instance_of(model, "sklearn.base", "BaseEstimator"):
        if not hasattr(model, "predict"):
            raise UserError(f"{type(model).__name__} has no predict(); package a fitted "
                            "estimator or Pipeline that ends in one")
        return "sklearn"
    if _instance_of(model, "torch.nn", "Module"):
        from reprise.store._torch import module_spec

        check_installed_classes(module_spec(model), type(model).__qualname__)
        return "torch"
    raise UserError(f"cannot package a {type(model).__name__}: give a fitted scikit-learn "
                    "estimator or Pipeline, or a torch.nn.Module")


def check_installed_classes(spec: Mapping[str, Any], where: str) -> None:
    """Refuse architectures whose classes are not from installed distributions.

    A package must load without running code that came with it or from a project
    folder that may not exist where it is served: build the model from library
    modules (``torch.nn.Sequential`` of layers), or install the package that defines
    its classes (``pip install -e .`` counts).
    """
    from reprise.env import distribution_for_module

    for path in sorted(_classes(spec)):
        module = path.partition(":")[0]
        if distribution_for_module(module) is None:
            raise PackageError(
                f"{where}: the architecture uses {path}, which is not part of an installed "
                "package; build the model from library classes (e.g. torch.nn.Sequential of "
                "layers) or install the package that defines it (pip install -e .)")


def _classes(spec: Mapping[str, Any]) -> set[str]:
    found = {str(spec.get("class"))}
    for _, child in spec.get("children") or []:
        found |= _classes(child)
    for value in (spec.get("args") or {}).values():
        if isinstance(value, dict) and "$module" in value:
            found |= _classes(value["$module"])
    return found


def _task(model: Any, flavor: str, target: Any, task: str | None,
          classes: Sequence[Any] | None) -> tuple[str, list[Any] | None]:
    import numpy as np

    known = ("binary", "multiclass", "regression")
    if task is not None and task not in known:
        raise UserError(f"task must be one of {list(known)}; got {task!r}")
    if classes is None and flavor == "sklearn" and hasattr(model, "classes_"):
        classes = list(np.asarray(model.classes_).tolist())
    if classes is None and target is not None and task != "regression":
        values = np.asarray(target)
        if values.dtype.kind in "iubOU":
            classes = sorted(np.unique(values).tolist())
    if task is None:
        task = "regression" if not classes else ("binary" if len(classes) == 2
                                                 else "multiclass")
    if task != "regression" and not classes:
        raise UserError(f"a {task} model needs its classes: pass classes= or target=")
    return task, (list(classes) if classes is not None and task != "regression" else None)


def _outputs(task: str, classes: list[Any] | None) -> list[Field]:
    if task == "regression":
        return [Field("prediction", "float")]
    kind = "string" if any(isinstance(c, str) for c in classes or []) else "int"
    return [Field("prediction", kind), Field("probabilities", "float",
                                             shape=(len(classes or []),))]


def _input_format(model: Any, prep: Any, sig: Signature, flavor: str) -> str:
    first = prep if prep is not None else model
    if hasattr(first, "feature_names_in_"):
        return "frame"  # fitted on a DataFrame: columns by name
    tensors = [f for f in sig.inputs if f.shape]
    if tensors:
        if len(sig.inputs) != 1 or flavor != "torch":
            raise UserError("a tensor input (a column with a shape per row) is supported as "
                            "the single input of a torch model")
        return "tensor"
    if any(f.dtype == "string" for f in sig.inputs) and prep is None:
        raise UserError("the sample has text columns but no preprocessing encodes them; fit "
                        "the encoder in a Pipeline or pass preprocessing=")
    return "array"


def _example(sample: Any, sig: Signature, rows: int) -> list[dict[str, Any]]:
    from reprise.registry._infer import _columns_of

    columns = _columns_of(sample)
    n = min(rows, min(len(v) for v in columns.values()))
    return [{f.name: _plain(columns[f.name][i]) for f in sig.inputs} for i in range(n)]


def _plain(value: Any) -> Any:
    """JSON-safe plain Python values (numpy scalars and arrays, NaN as None)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _target_name(target: Any) -> str | None:
    """The target column's name (a named pandas Series), else None."""
    name = getattr(target, "name", None)
    return name if isinstance(name, str) and name else None


def _card(task: str, classes: list[Any] | None, evaluation: Mapping[str, Any] | None,
          description: str | None, target: str | None = None) -> dict[str, Any]:
    card: dict[str, Any] = {"task": task, "classes": classes, "description": description}
    if target is not None:
        card["target"] = target
    if evaluation is None:
        card["gates"] = None  # unknown: promotion needs --force
        return card
    metrics = dict(evaluation.get("metrics") or {})
    card["metrics"] = {k: _plain(v) for k, v in list(metrics.items())[:_CARD_METRICS]}
    gates = evaluation.get("gates")
    card["gates"] = _plain(gates) if gates else {"passed": None, "results": []}
    card["worst_slice"] = _plain(evaluation.get("worst_slice") or {})
    return card
