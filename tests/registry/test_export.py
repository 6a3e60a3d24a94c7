"""Exports of a registered version (reprise.registry._export): the Docker context is
byte-reproducible and holds the package byte for byte, the Kubernetes manifests pass
the Kubernetes OpenAPI schema, the MLflow model loads in MLflow and predicts as
Reprise does; bad outputs are refused and nothing is left half written."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from reprise.core.errors import NotFoundError, UserError
from reprise.registry import load_model, package_model, promote, register_package
from reprise.registry._export import (
    FIXED_MTIME,
    KUBERNETES_VERSION,
    export_docker,
    export_kubernetes,
    export_mlflow,
    serving_requirements,
)


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(120, 3)), columns=["a", "b", "c"])
    frame["plan"] = rng.choice(["basic", "pro", "team"], size=len(frame))
    return frame


def _churn(workspace: Any) -> pd.DataFrame:
    """Register a pipeline with a categorical encoder as churn:1, @production."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    frame = _frame()
    model = Pipeline([("prep", ColumnTransformer([
        ("num", StandardScaler(), ["a", "b", "c"]),
        ("cat", OneHotEncoder(handle_unknown="ignore"), ["plan"])])),
        ("clf", LogisticRegression())]).fit(frame, (frame["a"] + (frame["plan"] == "pro")
                                                    > 0.5).astype(int))
    version = register_package("churn", package_model(model, sample=frame),
                               workspace=workspace).version
    promote("churn", version, "production", workspace=workspace, force=True, reason="test")
    return frame


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_docker_context_is_byte_reproducible_and_holds_the_package(
        workspace: Any, tmp_path: Path) -> None:
    _churn(workspace)
    a = export_docker("churn@production", tmp_path / "a", workspace=workspace)
    b = export_docker("churn@production", tmp_path / "b", workspace=workspace)
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    assert a.files == b.files and a.model == "churn:1" and a.alias == "production"
    assert {os.stat(p).st_mtime for p in (tmp_path / "a").rglob("*")} == {FIXED_MTIME}
    # the package inside is the registered one, byte for byte, and verifies
    from reprise.registry import read_package

    pkg = read_package(tmp_path / "a" / "package")
    manifest = json.loads((tmp_path / "a" / "package" / "manifest.json").read_bytes())
    assert sorted(manifest["files"]) == sorted(
        f.removeprefix("package/") for f in a.files
        if f.startswith("package/") and f != "package/manifest.json")
    assert pkg.requirements == load_model("churn:1", workspace=workspace).requirements
    dockerfile = (tmp_path / "a" / "Dockerfile").read_text()
    assert "FROM ${PYTHON_IMAGE}" in dockerfile and "python:3.11-slim" in dockerfile
    assert 'HEALTHCHECK' in dockerfile and "healthcheck.py" in dockerfile
    assert "/healthz" in (tmp_path / "a" / "healthcheck.py").read_text()
    assert "USER 10001:10001" in dockerfile
    assert 'serve "churn@production"' in (tmp_path / "a" / "entrypoint.sh").read_text()
    lock = (tmp_path / "a" / "requirements.txt").read_text().split()
    assert all("==" in line for line in lock)
    names = {line.partition("==")[0].lower() for line in lock}
    assert {"reprise-ml", "scikit-learn", "fastapi", "uvicorn", "starlette"} <= names


def test_the_lock_pins_the_package_requirements_and_the_serve_extra() -> None:
    from importlib import metadata

    lock = serving_requirements(["numpy==1.0.0"], "3.11")
    assert "numpy==1.0.0" in lock  # the package's own pin wins over the installed one
    assert f"uvicorn=={metadata.version('uvicorn')}" in lock
    assert lock == sorted(lock, key=lambda s: s.partition("==")[0].lower().replace("_", "-"))
    assert not any(line.lower().startswith("pytest") for line in lock)  # dev extra not


def test_a_wheelhouse_makes_the_install_offline(workspace: Any, tmp_path: Path) -> None:
    _churn(workspace)
    house = tmp_path / "house"
    house.mkdir()
    (house / "reprise_ml-0.1.0-py3-none-any.whl").write_bytes(b"PK fake wheel")
    out = tmp_path / "ctx"
    export_docker("churn@production", out, wheelhouse=house, workspace=workspace)
    assert (out / "wheels" / "reprise_ml-0.1.0-py3-none-any.whl").read_bytes() == b"PK fake wheel"
    assert "pip install --no-index --find-links" in (out / "Dockerfile").read_text()
    (house / "reprise_ml-0.1.0-py3-none-any.whl").unlink()
    with pytest.raises(UserError, match="no .whl"):
        export_docker("churn@production", tmp_path / "ctx2", wheelhouse=house,
                      workspace=workspace)
    assert not (tmp_path / "ctx2").exists()


def test_bad_outputs_are_refused_and_nothing_is_half_written(
        workspace: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _churn(workspace)
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty.*--force"):
        export_docker("churn@production", full, workspace=workspace)
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    export_docker("churn@production", full, force=True, workspace=workspace)
    assert not (full / "keep.txt").exists() and (full / "Dockerfile").is_file()
    export_kubernetes("churn@production", tmp_path / "new" / "k8s", workspace=workspace)
    assert (tmp_path / "new" / "k8s" / "deployment.yaml").is_file()  # parents are made
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="cannot be created"):
        export_kubernetes("churn@production", tmp_path / "afile" / "k8s", workspace=workspace)
    with pytest.raises(UserError, match="not a folder"):
        export_kubernetes("churn@production", tmp_path / "afile", force=True,
                          workspace=workspace)
    with pytest.raises(NotFoundError, match="no alias 'staging'"):
        export_docker("churn@staging", tmp_path / "x", workspace=workspace)
    with pytest.raises(NotFoundError, match="no model 'ghost'"):
        export_kubernetes("ghost@production", tmp_path / "x", workspace=workspace)
    # a failure while writing leaves neither the output nor a temporary folder
    import reprise.registry._export as ex

    def boom(root: Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(ex, "_fix_times", boom)
    with pytest.raises(OSError, match="disk full"):
        export_docker("churn@production", tmp_path / "broken", workspace=workspace)
    with pytest.raises(OSError, match="disk full"):
        export_docker("churn@production", full, force=True, workspace=workspace)
    assert (full / "Dockerfile").is_file()  # the old export is still whole
    # no temporary folder left beside the outputs
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert not (tmp_path / "broken").exists()


def test_an_unwritable_folder_is_a_user_error(workspace: Any, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _churn(workspace)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: the permission check answers as for a user
        monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != locked)
    try:
        with pytest.raises(UserError, match="not writable"):
            export_kubernetes("churn@production", locked / "k8s", workspace=workspace)
    finally:
        locked.chmod(0o755)


def test_the_kubernetes_manifests_pass_the_openapi_schema(workspace: Any,
                                                          tmp_path: Path) -> None:
    import kubernetes_validate

    _churn(workspace)
    out = tmp_path / "k8s"
    result = export_kubernetes("churn@production", out, image="registry.example/churn:1",
                               workspace=workspace, replicas=3, max_replicas=6)
    assert result.files == ["README.md", "deployment.yaml", "hpa.yaml", "service.yaml"]
    docs = {f: yaml.safe_load((out / f).read_text()) for f in result.files if f != "README.md"}
    for doc in docs.values():
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    dep = docs["deployment.yaml"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/churn:1"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"] and container["resources"]["requests"]
    token = {e["name"]: e for e in container["env"]}["REPRISE_SERVE_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": "reprise-churn-token", "key": "token"}
    assert container["securityContext"]["runAsNonRoot"] is True
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"] != 0
    svc, hpa = docs["service.yaml"], docs["hpa.yaml"]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 6)
    # the schema check can fail: a broken manifest is refused
    del container["image"], dep["spec"]["selector"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, KUBERNETES_VERSION, strict=True)
    again = tmp_path / "k8s2"
    export_kubernetes("churn@production", again, image="registry.example/churn:1",
                      workspace=workspace, replicas=3, max_replicas=6)
    assert _tree(out) == _tree(again)


@pytest.mark.filterwarnings("ignore:.*Add type hints to the `predict` method:UserWarning")
def test_the_mlflow_model_loads_in_mlflow_and_predicts_as_reprise(
        workspace: Any, tmp_path: Path) -> None:
    frame = _churn(workspace)
    out = tmp_path / "mlflow"
    result = export_mlflow("churn:1", out, workspace=workspace)
    import mlflow.pyfunc  # after the export, which imports it quietly (MLflow's notices)

    assert "MLmodel" in result.files
    assert not [f for f in result.files if f.endswith((".pkl", ".pickle"))]  # no pickle
    mlmodel = yaml.safe_load((out / "MLmodel").read_text())
    assert mlmodel["metadata"]["reprise_model"] == "churn:1"
    pyfunc = mlmodel["flavors"]["python_function"]  # a model from code: the wrapper's
    assert pyfunc["loader_module"] == "mlflow.pyfunc.loaders.code_model"  # source, stored
    assert (out / Path(pyfunc["model_code_path"]).name).is_file()  # beside MLmodel
    pkg = load_model("churn:1", workspace=workspace)
    rows = pd.DataFrame(pkg.example + frame.head(20).to_dict(orient="records"))
    expected = pkg.predict_records(rows.to_dict(orient="records"))
    got = mlflow.pyfunc.load_model(str(out)).predict(rows)
    assert got["prediction"].tolist() == expected["prediction"]
    np.testing.assert_allclose(np.array(got["probabilities"].tolist()),
                               np.array(expected["probabilities"]), rtol=0, atol=0)
    with pytest.raises(UserError, match="not empty"):
        export_mlflow("churn:1", out, workspace=workspace)


def test_a_long_odd_model_name_still_gives_valid_manifests(workspace: Any,
                                                          tmp_path: Path) -> None:
    import kubernetes_validate
    from sklearn.linear_model import LogisticRegression

    frame = _frame()[["a", "b"]]
    name = "Churn_Model." + "x" * 80 + "v2_"  # 95 characters, ending in "_"
    clf = LogisticRegression().fit(frame, (frame["a"] > 0).astype(int))
    version = register_package(name, package_model(clf, sample=frame),
                               workspace=workspace).version
    promote(name, version, "prod", workspace=workspace, force=True, reason="test")
    out = tmp_path / "k8s"
    export_kubernetes(f"{name}@prod", out, workspace=workspace)
    for f in ("deployment.yaml", "service.yaml", "hpa.yaml"):
        doc = yaml.safe_load((out / f).read_text())
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        assert len(doc["metadata"]["name"]) <= 63
        assert all(len(v) <= 63 and v[-1].isalnum() for v in doc["metadata"]["labels"].values())


@pytest.mark.filterwarnings("ignore:.*Add type hints to the `predict` method:UserWarning")
def test_a_torch_package_through_mlflow_predicts_as_reprise(workspace: Any,
                                                            tmp_path: Path) -> None:
    import torch
    from sklearn.preprocessing import StandardScaler

    frame = _frame()[["a", "b"]]
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    pkg = package_model(net.eval(), sample=frame, target=(frame["a"] > 0).astype(int),
                        preprocessing=StandardScaler().fit(frame.to_numpy()))
    register_package("mlp", pkg, workspace=workspace)
    out = tmp_path / "mlflow"
    export_mlflow("mlp:1", out, workspace=workspace)
    import mlflow.pyfunc

    rows = frame.head(16)
    expected = load_model("mlp:1", workspace=workspace).predict_records(
        rows.to_dict(orient="records"))
    got = mlflow.pyfunc.load_model(str(out)).predict(rows)
    assert got["prediction"].tolist() == expected["prediction"]
    np.testing.assert_allclose(np.array(got["probabilities"].tolist()),
                               np.array(expected["probabilities"]), rtol=0, atol=0)
