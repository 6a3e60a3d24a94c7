"""Model packages: what goes in, that it predicts like the model it holds, that equal
contents give equal bytes, and that anything altered, missing or unsafe is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import reprise
from reprise.core.errors import UserError
from reprise.registry import PackageError, package_model, read_package
from reprise.store._materializers import load_object, save_object


def data(n: int = 60) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(0)
    x = pd.DataFrame({"age": rng.uniform(20, 70, n), "income": rng.uniform(1, 9, n),
                      "plan": rng.choice(["basic", "gold"], n)})
    y = ((x["age"] > 45) ^ (x["plan"] == "gold")).astype(int).to_numpy()
    return x, y


def sklearn_pipeline() -> tuple[Any, pd.DataFrame, np.ndarray]:
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    x, y = data()
    prep = ColumnTransformer([("num", StandardScaler(), ["age", "income"]),
                              ("cat", OneHotEncoder(), ["plan"])])
    return make_pipeline(prep, LogisticRegression()).fit(x, y), x, y


def test_an_sklearn_pipeline_package_predicts_like_the_pipeline(tmp_path: Path) -> None:
    model, x, y = sklearn_pipeline()
    pkg = package_model(model, sample=x, description="churn")
    assert pkg.flavor == "sklearn" and pkg.input_format == "frame"
    assert pkg.card["task"] == "binary" and pkg.card["classes"] == [0, 1]
    sig = pkg.signature.to_dict()
    assert [f["name"] for f in sig["inputs"]] == ["age", "income", "plan"]
    assert sig["inputs"][2]["categories"] == ["basic", "gold"]
    assert [f["name"] for f in sig["outputs"]] == ["prediction", "probabilities"]
    assert len(pkg.example) == 3 and set(pkg.example[0]) == {"age", "income", "plan"}
    records = x.head(10).to_dict("records")
    out = pkg.predict_records(records)
    assert out["prediction"] == model.predict(x.head(10)).tolist()
    np.testing.assert_allclose(out["probabilities"], model.predict_proba(x.head(10)))
    back = read_package(pkg.write(tmp_path / "pkg"))
    assert back.predict_records(records) == out
    assert any(r.startswith("scikit-learn==") for r in back.requirements)
    assert back.environment["python"] == pkg.environment["python"]


def test_a_torch_model_with_its_fitted_preprocessing() -> None:
    from sklearn.preprocessing import StandardScaler

    x, y = data()
    num = x[["age", "income"]]
    scaler = StandardScaler().fit(num.to_numpy())
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    pkg = package_model(net.eval(), sample=num, target=y, preprocessing=scaler)
    assert pkg.flavor == "torch" and pkg.input_format == "array"
    out = pkg.predict_records(num.head(4).to_dict("records"))
    with torch.no_grad():
        want = torch.softmax(net(torch.tensor(scaler.transform(num.head(4).to_numpy()),
                                              dtype=torch.float32)).double(), dim=1)
    np.testing.assert_allclose(out["probabilities"], want.numpy(), rtol=1e-6)
    assert out["prediction"] == want.argmax(dim=1).tolist()


def test_equal_contents_give_equal_bytes(tmp_path: Path) -> None:
    store = reprise.store.open_artifact_store(tmp_path / "store")
    model, x, _ = sklearn_pipeline()
    first = save_object(store, package_model(model, sample=x))
    second = save_object(store, package_model(model, sample=x))
    assert first.hash == second.hash and first.kind == "model-package"
    pkg = load_object(store, first.hash, first.materializer, first.meta)
    assert pkg.predict_records(pkg.example)["prediction"]


def test_a_model_class_from_a_project_folder_is_refused() -> None:
    from tests.registry._models import Tiny

    x, y = data()
    with pytest.raises(PackageError, match="not part of an installed package"):
        package_model(Tiny(2), sample=x[["age", "income"]], target=y)


@pytest.mark.parametrize("damage", ["edit", "extra", "missing", "manifest"])
def test_an_altered_package_is_refused_naming_the_file(tmp_path: Path, damage: str) -> None:
    model, x, _ = sklearn_pipeline()
    folder = package_model(model, sample=x).write(tmp_path / "pkg")
    if damage == "edit":
        (folder / "model/model.skops").write_bytes(b"PK" + b"\0" * 100)
        needle = "model/model.skops does not match"
    elif damage == "extra":
        (folder / "model/evil.py").write_text("import os")
        needle = r"does not list: \['model/evil.py'\]"
    elif damage == "missing":
        (folder / "signature.json").unlink()
        needle = "lacks signature.json"
    else:
        doc = json.loads((folder / "manifest.json").read_text())
        doc["version"] = 99
        (folder / "manifest.json").write_text(json.dumps(doc))
        needle = "format version 99"
    with pytest.raises(PackageError, match=needle):
        read_package(folder)


def test_a_tampered_stored_package_fails_its_content_hash(tmp_path: Path) -> None:
    from reprise.core.errors import IntegrityError

    store = reprise.store.open_artifact_store(tmp_path / "store")
    model, x, _ = sklearn_pipeline()
    rec = save_object(store, package_model(model, sample=x))
    blob = store.local_path(rec.hash)
    assert blob is not None
    blob.chmod(0o644)
    raw = bytearray(blob.read_bytes())
    raw[600] ^= 0xFF
    blob.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError):
        load_object(store, rec.hash, rec.materializer, rec.meta)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"model": "not a model"}, "cannot package a str"),
    ({"preprocessing": 3}, "fitted scikit-learn transformer"),
    ({"task": "ranking"}, "task must be one of"),
    ({"example_rows": 0}, "example_rows must be"),
    ({"sample": [1, 2, 3]}, "cannot infer a signature"),
])
def test_bad_arguments(kwargs: dict[str, Any], needle: str) -> None:
    model, x, _ = sklearn_pipeline()
    args: dict[str, Any] = {"model": model, "sample": x, **kwargs}
    with pytest.raises(UserError, match=needle):
        package_model(args.pop("model"), **args)


def test_a_sample_that_is_not_the_raw_features_is_caught() -> None:
    model, x, _ = sklearn_pipeline()
    with pytest.raises(UserError, match="cannot predict its own example rows|signature"):
        package_model(model, sample=x.drop(columns=["plan"]))


def test_a_torch_classifier_needs_its_classes() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    x, _ = data()
    with pytest.raises(UserError, match="needs its classes"):
        package_model(net, sample=x[["age", "income"]], task="binary")
    reg = package_model(torch.nn.Sequential(torch.nn.Linear(2, 1)), sample=x[["age", "income"]])
    assert reg.card["task"] == "regression"
    assert len(reg.predict_records(reg.example)["prediction"]) == 3
