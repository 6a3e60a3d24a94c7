"""Model materializers: torch modules and tensors (safetensors), scikit-learn (skops)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from torch import nn

from reprise.core.errors import IntegrityError, MaterializerError
from reprise.store import (
    BaseArtifactStore,
    LocalArtifactStore,
    _materializer,
    _ml,
    _torch,
    load_object,
    open_artifact_store,
    save_object,
)
from reprise.store._materializers import materializer_for_type
from reprise.store._ml import load_estimator, save_estimator
from reprise.store._torch import build_module, module_spec
from tests.store._ml_models import Doubler, Opaque, Shifter, TiedLM, TinyNet, Wrapper


@pytest.fixture
def store(tmp_path: Path) -> BaseArtifactStore:
    return open_artifact_store(tmp_path / "artifacts")


@pytest.fixture(autouse=True)
def _seeded(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    monkeypatch.delenv(_ml.TRUSTED_TYPES_ENV, raising=False)


def roundtrip(store: BaseArtifactStore, obj: Any) -> tuple[Any, Any]:
    rec = save_object(store, obj)
    json.dumps(rec.meta)
    return rec, load_object(store, rec.hash, rec.materializer, rec.meta)


def assert_same_state(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key in sa:
        assert sa[key].dtype == sb[key].dtype, key
        assert torch.equal(sa[key], sb[key]), key


# -- torch modules ----------------------------------------------------------------------------


def test_sequential_roundtrip_gives_the_same_outputs(store: BaseArtifactStore) -> None:
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
                          nn.ReLU(), nn.Flatten(), nn.Dropout(0.3), nn.Linear(64, 3))
    x = torch.randn(5, 1, 4, 4)
    model(x)  # moves the BatchNorm running statistics away from their initial values
    model.eval()
    rec, back = roundtrip(store, model)
    assert (rec.materializer, rec.kind) == ("torch-module", "model")
    assert rec.meta["class"] == "torch.nn.modules.container:Sequential"
    assert rec.meta["training"] is False
    assert type(back) is nn.Sequential and [type(m) for m in back] == [type(m) for m in model]
    assert back[0].bias is None and back[4].p == 0.3 and back[0].padding == (1, 1)
    assert not back.training and not back[1].training
    assert_same_state(model, back)
    torch.testing.assert_close(back(x), model(x), rtol=0, atol=0)


def test_equal_models_have_one_hash(store: BaseArtifactStore) -> None:
    model = TinyNet(3)
    rec, back = roundtrip(store, model)
    assert save_object(store, model).hash == rec.hash
    assert save_object(store, back).hash == rec.hash
    with torch.no_grad():
        back.head.bias.add_(1.0)
    assert save_object(store, back).hash != rec.hash


def test_constructor_args_are_recovered_from_attributes(store: BaseArtifactStore) -> None:
    model = TinyNet(3, hidden=5, act="tanh", dropout=0.25)
    model.scale.fill_(2.0)  # a buffer
    assert module_spec(model)["args"] == {
        "n_in": 3, "hidden": 5, "n_out": 2, "act": "tanh", "dropout": 0.25}
    _, back = roundtrip(store, model)
    assert type(back) is TinyNet and (back.hidden, back.act, back.dropout) == (5, "tanh", 0.25)
    assert isinstance(back.body[1], nn.Tanh)
    assert_same_state(model, back)


def test_train_and_eval_modes_come_back_per_module(store: BaseArtifactStore) -> None:
    model = TinyNet(3).train()
    model.body.eval()  # e.g. a frozen backbone
    _, back = roundtrip(store, model)
    assert back.training and back.head.training
    assert not back.body.training and not back.body[0].training


def test_weights_tied_by_the_constructor_stay_tied(store: BaseArtifactStore) -> None:
    model = TiedLM(10, 4)
    _, back = roundtrip(store, model)
    assert back.out.weight is back.embed.weight
    assert_same_state(model, back)


def test_weights_tied_after_construction_are_tied_again(store: BaseArtifactStore) -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    model[1].weight = model[0].weight
    _, back = roundtrip(store, model)
    assert back[1].weight is back[0].weight
    assert back[1].bias is not back[0].bias
    assert_same_state(model, back)


def test_views_of_one_storage_are_stored_apart(store: BaseArtifactStore) -> None:
    model = TinyNet(3, n_out=2)
    base = torch.arange(6.0)
    model.head.bias = nn.Parameter(base[:2])
    model.scale = base[2:4]  # a buffer that views the same storage
    model.head.weight = nn.Parameter(torch.arange(16.0).view(8, 2).t())  # not contiguous
    _, back = roundtrip(store, model)
    assert_same_state(model, back)
    assert torch.equal(back.scale, torch.tensor([2.0, 3.0]))


def test_module_arguments_and_tuples_are_kept(store: BaseArtifactStore) -> None:
    model = Wrapper(nn.Linear(2, 3), scale=(2.0, 3.0))
    _, back = roundtrip(store, model)
    assert back.scale == (2.0, 3.0) and isinstance(back.backbone, nn.Linear)
    assert back.backbone.out_features == 3
    assert_same_state(model, back)


def test_named_sequential_and_module_containers(store: BaseArtifactStore) -> None:
    model = nn.ModuleDict({
        "enc": nn.Sequential(OrderedDict(fc=nn.Linear(2, 2), act=nn.GELU())),
        "heads": nn.ModuleList([nn.Linear(2, 1), nn.Linear(2, 1)]),
    })
    _, back = roundtrip(store, model)
    assert list(back["enc"]._modules) == ["fc", "act"] and len(back["heads"]) == 2
    assert_same_state(model, back)


def test_recurrent_modules_taking_star_args(store: BaseArtifactStore) -> None:
    model = nn.LSTM(3, 4, num_layers=2, batch_first=True)
    _, back = roundtrip(store, model)
    assert (back.hidden_size, back.num_layers, back.batch_first) == (4, 2, True)
    assert_same_state(model, back)


def test_dtype_is_kept(store: BaseArtifactStore) -> None:
    model = TinyNet(3).double()
    with torch.no_grad():
        model.head.weight.add_(1e-12)  # lost if it went through float32
    _, back = roundtrip(store, model)
    assert back.head.weight.dtype == torch.float64
    assert_same_state(model, back)


def test_missing_constructor_arg_names_class_and_parameter(store: BaseArtifactStore) -> None:
    with pytest.raises(MaterializerError, match=r"'size' of tests\.store\._ml_models\.Opaque"
                       r".*model\.reprise_init_args"):
        save_object(store, Opaque(3))
    assert list(store.iter_hashes()) == []
    model = Opaque(3)
    model.reprise_init_args = {"size": 3}
    _, back = roundtrip(store, model)
    assert back.layer.in_features == 3
    assert_same_state(model, back)


def test_wrongly_recovered_args_are_caught_at_save(store: BaseArtifactStore) -> None:
    with pytest.raises(MaterializerError, match="Doubler.*other tensors.*reprise_init_args"):
        save_object(store, Doubler(2))
    with pytest.raises(MaterializerError, match="reprise_init_args"):
        model = Opaque(3)
        model.reprise_init_args = {"size": 4}
        save_object(store, model)


def test_classes_that_cannot_be_imported_are_refused(store: BaseArtifactStore) -> None:
    class Local(nn.Module):
        pass

    with pytest.raises(MaterializerError, match="inside a function"):
        save_object(store, Local())
    Local.__module__, Local.__qualname__ = "__main__", "Local"
    with pytest.raises(MaterializerError, match="defined in __main__.*move the class"):
        save_object(store, Local())


def test_load_builds_only_torch_modules() -> None:
    with pytest.raises(MaterializerError, match="not a torch.nn.Module subclass"):
        build_module({"class": "subprocess:Popen", "args": {"args": ["true"]}})
    with pytest.raises(MaterializerError, match="cannot import"):
        build_module({"class": "no_such_module_xyz:Net", "args": {}})


def test_weights_that_no_longer_fit_the_class_are_an_error(
        store: BaseArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    model = Opaque(3)
    model.reprise_init_args = {"size": 4}
    monkeypatch.setattr(_torch, "_check_rebuild", lambda model, spec: None)
    rec = save_object(store, model)
    with pytest.raises(MaterializerError, match="do not fit.*Opaque"):
        load_object(store, rec.hash, rec.materializer, rec.meta)


def test_large_models_spill_to_a_temp_file(store: BaseArtifactStore,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    model = TinyNet(3)
    in_memory = save_object(store, model).hash
    monkeypatch.setattr(_materializer, "_SPILL_BYTES", 0)
    rec, back = roundtrip(store, model)
    assert rec.hash == in_memory
    assert_same_state(model, back)


@pytest.fixture
def memory_store() -> Iterator[BaseArtifactStore]:
    remote = open_artifact_store(f"memory://reprise-test-{uuid.uuid4().hex}")
    yield remote
    remote.fs.rm(remote.root, recursive=True)  # type: ignore[attr-defined]


def test_remote_store_roundtrip(memory_store: BaseArtifactStore) -> None:
    model = TiedLM(5, 3)
    _, back = roundtrip(memory_store, model)
    assert back.out.weight is back.embed.weight
    assert_same_state(model, back)


# -- torch tensors ----------------------------------------------------------------------------


@pytest.mark.parametrize("tensor", [
    torch.arange(12, dtype=torch.float16).reshape(3, 4)[:, ::2],  # a strided view
    torch.arange(5, dtype=torch.int64),
    torch.tensor([True, False]),
    torch.randn(2, 3).to(torch.bfloat16),
    torch.tensor(3.5, dtype=torch.float64),
    torch.zeros(0, 3),
])
def test_tensor_roundtrip(store: BaseArtifactStore, tensor: torch.Tensor) -> None:
    rec, back = roundtrip(store, tensor)
    assert (rec.materializer, rec.kind) == ("torch-tensor", "array")
    assert rec.meta["dtype"] == str(tensor.dtype).removeprefix("torch.")
    assert rec.meta["shape"] == list(tensor.shape)
    assert type(back) is torch.Tensor and back.device.type == "cpu"
    assert back.dtype == tensor.dtype and back.shape == tensor.shape
    assert torch.equal(back, tensor)


def test_parameter_roundtrip_keeps_requires_grad(store: BaseArtifactStore) -> None:
    _, back = roundtrip(store, nn.Parameter(torch.ones(2), requires_grad=False))
    assert isinstance(back, nn.Parameter) and not back.requires_grad
    _, back = roundtrip(store, torch.ones(2, requires_grad=True))
    assert type(back) is torch.Tensor and back.requires_grad


@pytest.mark.parametrize("tensor", [torch.ones(2, dtype=torch.complex128),
                                    torch.eye(3).to_sparse()])
def test_unstorable_tensors_are_refused(store: BaseArtifactStore, tensor: torch.Tensor) -> None:
    with pytest.raises(MaterializerError):
        save_object(store, tensor)


# -- scikit-learn -----------------------------------------------------------------------------


@pytest.fixture
def xy() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4)) * [1, 10, 100, 0.1]
    return X, (X[:, 0] + X[:, 1] / 10 > 0).astype(int)


@pytest.mark.parametrize("make", [
    lambda: LogisticRegression(C=0.5),
    lambda: Pipeline([("scale", StandardScaler()), ("clf", LogisticRegression())]),
    lambda: RandomForestClassifier(n_estimators=3, random_state=0),
])
def test_sklearn_roundtrip_predicts_the_same(store: BaseArtifactStore, xy: Any,
                                             make: Any) -> None:
    X, y = xy
    est = make().fit(X, y)
    rec, back = roundtrip(store, est)
    assert (rec.materializer, rec.kind) == ("sklearn", "model")
    assert rec.meta["class"].endswith(type(est).__name__)
    assert type(back) is type(est) and back.get_params(deep=False).keys() == \
        est.get_params(deep=False).keys()
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))


def test_untrusted_types_are_refused_with_the_fix(store: BaseArtifactStore, xy: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = xy
    est = Pipeline([("shift", Shifter()), ("clf", LogisticRegression())]).fit(X, y)
    rec = save_object(store, est)
    with pytest.raises(MaterializerError, match=r"tests\.store\._ml_models\.Shifter.*"
                       "REPRISE_TRUSTED_TYPES.*load_estimator"):
        load_object(store, rec.hash, rec.materializer, rec.meta)
    monkeypatch.setenv(_ml.TRUSTED_TYPES_ENV, "tests.store.*")
    back = load_object(store, rec.hash, rec.materializer, rec.meta)
    np.testing.assert_array_equal(back.predict(X), est.predict(X))


def test_builtin_functions_are_not_trusted(store: BaseArtifactStore) -> None:
    rec = save_object(store, FunctionTransformer(eval))
    with pytest.raises(MaterializerError, match="builtins.eval"):
        load_object(store, rec.hash, rec.materializer, rec.meta)


def test_save_and_load_estimator_files(tmp_path: Path, xy: Any) -> None:
    X, y = xy
    est = Pipeline([("shift", Shifter(2.0)), ("clf", LogisticRegression())]).fit(X, y)
    path = save_estimator(est, tmp_path / "m.skops")
    assert [p.name for p in tmp_path.iterdir()] == ["m.skops"]  # no temp file left
    with pytest.raises(MaterializerError, match="Shifter"):
        load_estimator(path)
    back = load_estimator(path, trusted=["tests.store._ml_models.Shifter"])
    assert back[0].shift == 2.0
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    (tmp_path / "bad.skops").write_bytes(b"not a zip")
    with pytest.raises(MaterializerError, match="not a readable skops file"):
        load_estimator(tmp_path / "bad.skops")


# -- shared -----------------------------------------------------------------------------------


def test_corrupt_blobs_are_not_decoded(store: BaseArtifactStore, xy: Any) -> None:
    assert isinstance(store, LocalArtifactStore)
    for obj in (TinyNet(2), torch.arange(4.0), LogisticRegression().fit(*xy)):
        rec = save_object(store, obj)
        blob = store.local_path(rec.hash)
        assert blob is not None
        blob.chmod(0o644)
        data = bytearray(blob.read_bytes())
        data[-3] ^= 0xFF
        blob.write_bytes(bytes(data))
        with pytest.raises(IntegrityError):
            load_object(store, rec.hash, rec.materializer, rec.meta)


def test_annotations_map_to_the_model_materializers() -> None:
    assert materializer_for_type(nn.Linear).name == "torch-module"  # type: ignore[union-attr]
    assert materializer_for_type(torch.Tensor).name == "torch-tensor"  # type: ignore[union-attr]
    assert materializer_for_type(Pipeline).name == "sklearn"  # type: ignore[union-attr]


def test_materializer_lookup_imports_no_ml_library() -> None:
    code = ("import sys, numpy, reprise.store as s; s.materializer_for(numpy.arange(2)); "
            "s.materializer_for({'a': 1}); s.materializer_by_name('torch-module'); "
            "print(sorted(m for m in ('torch', 'sklearn', 'skops', 'safetensors') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "[]"
