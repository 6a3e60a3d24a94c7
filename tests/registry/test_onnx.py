"""ONNX variants: conversion with the preprocessing in the graph, parity, quantisation
gate, tamper refusal, lineage and audit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reprise
from reprise.core.errors import UserError
from reprise.registry import (
    audit_log,
    describe_model,
    load_model,
    optimize,
    package_model,
    promote,
    read_package,
    register_package,
)


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("REPRISE_ACTOR", "tester")
    monkeypatch.chdir(tmp_path)
    w = reprise.init(tmp_path)
    yield w
    w.close()


def _frame(n: int = 300, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = pd.DataFrame({"a": rng.normal(size=n), "b": rng.uniform(0, 10, n),
                      "city": rng.choice(["oslo", "rome", "lima"], n)})
    y = ((x["a"] + (x["city"] == "rome") * 1.5 + x["b"] / 10) > 0.8).astype(int).to_numpy()
    return x, y


def _numeric() -> tuple[pd.DataFrame, np.ndarray]:
    x, y = _frame()
    return x[["a", "b"]], y


def _gates(passed: bool | None = True) -> dict[str, Any]:
    return {"metrics": {"accuracy": {"value": 0.9}},
            "gates": {"passed": passed, "results": []}}


def _sklearn(kind: str) -> tuple[Any, pd.DataFrame, np.ndarray]:
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import (
        GradientBoostingClassifier,
        HistGradientBoostingClassifier,
        RandomForestClassifier,
    )
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    x, y = _numeric()
    if kind == "logistic":
        model = make_pipeline(StandardScaler(), LogisticRegression())
    elif kind == "forest":
        model = RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0)
    elif kind == "gboost":
        model = GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0)
    elif kind == "histgb":
        model = HistGradientBoostingClassifier(max_iter=20, random_state=0)
    elif kind == "regression":
        model = make_pipeline(StandardScaler(), LinearRegression())
        return model.fit(x, x["a"] * 2 + 1), x, y
    else:  # a ColumnTransformer: one-hot text + scaled numbers
        x, y = _frame()
        model = make_pipeline(ColumnTransformer([
            ("num", StandardScaler(), ["a", "b"]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), ["city"])]), LogisticRegression())
    return model.fit(x, y), x, y


@pytest.mark.parametrize("kind", ["logistic", "forest", "gboost", "columns", "regression"])
def test_sklearn_families_keep_parity(ws: Any, kind: str) -> None:
    model, x, _ = _sklearn(kind)
    task = "regression" if kind == "regression" else None
    register_package("m", package_model(model, sample=x, evaluation=_gates(), task=task),
                     workspace=ws)
    rec = optimize("m", 1, workspace=ws)
    assert rec.version == 2 and rec.meta["source_version"] == 1
    parity = rec.meta["onnx"]
    assert parity["parity"] is True
    onnx_pkg, native = load_model("m:2", workspace=ws), load_model("m:1", workspace=ws)
    assert onnx_pkg.onnx_info is not None and onnx_pkg.onnx_info["parity"]["passed"]
    assert onnx_pkg.onnx_info["parity"]["rows"] > 200
    served = read_package(_folder(ws, "m", 2), runtime="onnx")
    rows = x.head(40).to_dict("records")
    a, b = native.predict_records(rows), served.predict_records(rows)
    assert a["prediction"] == b["prediction"] if task is None else np.allclose(
        a["prediction"], b["prediction"], atol=1e-4)
    if task is None:
        assert np.abs(np.array(a["probabilities"]) - np.array(b["probabilities"])).max() < 1e-5


def _folder(ws: Any, name: str, version: int) -> Path:
    from reprise.registry._api import _ws
    from reprise.registry._registry import get_version
    from reprise.store._materializers import materializer_by_name

    w = _ws(ws)
    rec = get_version(w, name, version)
    art = w.metadata.get_artifact(rec.package_hash)
    dest = Path(ws.root if hasattr(ws, "root") else ".") / f"unpacked-{name}-{version}"
    materializer_by_name(art.materializer).load(w.artifacts, art.hash, art.meta, dest=dest)
    return dest / "package"


def _mlp() -> tuple[Any, Any, pd.DataFrame, np.ndarray]:
    import torch
    from sklearn.preprocessing import StandardScaler

    x, y = _numeric()
    prep = StandardScaler().fit(x)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    xt = torch.tensor(np.array(prep.transform(x)), dtype=torch.float32)
    yt = torch.tensor(np.array(y))
    for _ in range(60):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    return net, prep, x, y


def test_torch_mlp_with_preprocessing_merged_keeps_parity(ws: Any) -> None:
    net, prep, x, y = _mlp()
    register_package("mlp", package_model(net, sample=x, target=y, preprocessing=prep,
                                          evaluation=_gates()), workspace=ws)
    rec = optimize("mlp", 1, workspace=ws)
    pkg = read_package(_folder(ws, "mlp", rec.version), runtime="onnx")
    assert pkg.model is None and pkg.preprocessing is None  # the graph holds both
    native = load_model("mlp:1", workspace=ws)
    rows = x.head(50).to_dict("records")
    a, b = native.predict_records(rows), pkg.predict_records(rows)
    assert a["prediction"] == b["prediction"]
    assert np.abs(np.array(a["probabilities"]) - np.array(b["probabilities"])).max() < 1e-5


def test_histgradientboosting_is_refused_by_name(ws: Any) -> None:
    # skl2onnx 1.20's converter fails on scikit-learn 1.9's HistGradientBoosting: the
    # converter's own error comes back as a UserError naming the estimator
    model, x, _ = _sklearn("histgb")
    register_package("h", package_model(model, sample=x), workspace=ws)
    with pytest.raises(UserError, match="cannot convert HistGradientBoostingClassifier"):
        optimize("h", 1, workspace=ws)
    assert len(describe_model("h", workspace=ws)["versions"]) == 1


def test_unsupported_estimator_is_named_and_nothing_registered(ws: Any) -> None:
    from sklearn.semi_supervised import LabelSpreading

    x, y = _numeric()
    model = LabelSpreading().fit(x, y)
    register_package("odd", package_model(model, sample=x), workspace=ws)
    with pytest.raises(UserError, match="no converter for LabelSpreading"):
        optimize("odd", 1, workspace=ws)
    assert [v["version"] for v in describe_model("odd", workspace=ws)["versions"]] == [1]
    assert load_model("odd:1", workspace=ws).predict_records(x.head(2).to_dict("records"))


def test_failing_parity_refuses_the_variant(ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from reprise.registry import _onnx

    model, x, _ = _sklearn("logistic")
    register_package("m", package_model(model, sample=x, evaluation=_gates()), workspace=ws)
    real = _onnx.predict_onnx

    def skewed(pkg: Any, columns: dict[str, Any]) -> dict[str, Any]:
        out = real(pkg, columns)
        out["probabilities"] = out["probabilities"] * 0.999 + 0.0005
        return out

    monkeypatch.setattr(_onnx, "predict_onnx", skewed)
    with pytest.raises(UserError, match="parity failed.*nothing was registered"):
        optimize("m", 1, workspace=ws)
    assert len(describe_model("m", workspace=ws)["versions"]) == 1


def test_tampered_onnx_file_is_refused(ws: Any) -> None:
    from reprise.registry import PackageError

    model, x, _ = _sklearn("logistic")
    register_package("m", package_model(model, sample=x), workspace=ws)
    optimize("m", 1, workspace=ws)
    folder = _folder(ws, "m", 2)
    graph = folder / "model" / "model.onnx"
    data = bytearray(graph.read_bytes())
    data[-1] ^= 1
    graph.write_bytes(bytes(data))
    for runtime in ("onnx", "native", "auto"):
        with pytest.raises(PackageError, match="model.onnx does not match"):
            read_package(folder, runtime=runtime)


def test_variant_lineage_audit_and_manifest(ws: Any) -> None:
    model, x, _ = _sklearn("columns")
    v1 = register_package("m", package_model(model, sample=x, evaluation=_gates()),
                          workspace=ws)
    v2 = optimize("m", 1, atol=1e-4, workspace=ws)
    assert v2.package_hash != v1.package_hash
    manifest = json.loads((_folder(ws, "m", 2) / "manifest.json").read_text())
    assert "model/model.onnx" in manifest["files"] and manifest["onnx"] == "model/model.onnx"
    events = [e for e in audit_log(workspace=ws) if e["action"] == "model.optimize"]
    assert len(events) == 1 and events[0]["payload"]["source"] == "m:1"
    card = load_model("m:2", workspace=ws).card
    assert card["onnx"]["source_version"] == 1 and card["onnx"]["parity"]["atol"] == 1e-4
    assert promote("m", 2, "production", workspace=ws) is None  # parity-proven: promotable
    with pytest.raises(UserError, match="already an ONNX variant"):
        optimize("m", 2, workspace=ws)


def test_auto_runtime_picks_the_graph_only_when_present(ws: Any) -> None:
    model, x, _ = _sklearn("logistic")
    register_package("m", package_model(model, sample=x), workspace=ws)
    optimize("m", 1, workspace=ws)
    assert read_package(_folder(ws, "m", 1), runtime="auto").runtime == "native"
    served = read_package(_folder(ws, "m", 2), runtime="auto")
    assert served.runtime == "onnx"
    from reprise.registry._api import float_dtype

    assert float_dtype(served) == "float32"  # the graph takes float32: the server checks
    with pytest.raises(UserError, match="no ONNX graph"):
        read_package(_folder(ws, "m", 1), runtime="onnx")


def test_quantized_mlp_gate_passes_on_holdout(ws: Any) -> None:
    net, prep, x, y = _mlp()
    register_package("mlp", package_model(net, sample=x, target=y, preprocessing=prep,
                                          evaluation=_gates()), workspace=ws)
    hx, hy = _frame(200, seed=1)
    rec = optimize("mlp", 1, quantize="dynamic-int8", holdout=hx[["a", "b"]],
                   holdout_target=hy, max_drop=0.05, workspace=ws)
    gate = load_model(f"mlp:{rec.version}", workspace=ws).card["onnx"]["quantization"]["gate"]
    assert gate["basis"] == "holdout" and gate["passed"] is True and gate["verdict"] == "pass"
    assert {r["metric"] for r in gate["results"]} == {"accuracy", "f1_macro"}
    assert gate["rows"] == 200 and gate["confidence"] == 0.95 and gate["seed"] == 0
    assert "paired bootstrap" in gate["method"] and "upper bound" in gate["rule"]
    assert "Clopper-Pearson upper bound of 0 of n" in gate["rule"]
    for r in gate["results"]:
        # the drop's interval is inside the limit; each model's holds its value
        assert r["drop_ci_low"] <= r["drop"] <= r["drop_ci_high"] <= 0.05
        assert r["drop_ci_high"] >= gate["unseen_change_bound"] > 0
        for who in ("native", "quantized"):
            assert r[f"{who}_ci_low"] <= r[who] <= r[f"{who}_ci_high"]
    assert rec.metrics["gates_passed"] is True


def test_quantization_gate_with_few_rows_is_inconclusive_and_blocks(ws: Any) -> None:
    net, prep, x, y = _mlp()
    register_package("mlp", package_model(net, sample=x, target=y, preprocessing=prep,
                                          evaluation=_gates()), workspace=ws)
    hx, hy = _frame(30, seed=1)
    rec = optimize("mlp", 1, quantize="dynamic-int8", holdout=hx[["a", "b"]],
                   holdout_target=hy, workspace=ws)
    gate = rec.meta["onnx"]["gate"]
    assert gate["verdict"] == "inconclusive" and gate["passed"] is False
    for r in gate["results"]:
        # 30 rows cannot show a drop within 0.5 point, whatever the drop here
        assert r["verdict"] == "inconclusive"
        assert r["drop_ci_low"] <= 0.005 < r["drop_ci_high"]
        assert "30 rows are too few to show the drop is within 0.5 points" in r["reason"]
    assert rec.metrics["gates_passed"] is False
    with pytest.raises(UserError, match="quantisation gate is inconclusive"):
        promote("mlp", rec.version, "production", workspace=ws)


def _degraded_pair() -> tuple[Any, Any, Any]:
    """A logistic model, one fitted on shuffled labels (a clear drop), and 1,000 held-out
    rows with labels."""
    from sklearn.linear_model import LogisticRegression

    from reprise.registry._holdout import Holdout

    x, y = _numeric()
    good = package_model(LogisticRegression().fit(x, y), sample=x)
    shuffled = np.random.default_rng(0).permutation(y)
    bad = package_model(LogisticRegression().fit(x, shuffled), sample=x)
    hx, hy = _frame(1000, seed=1)
    return good, bad, Holdout(rows=hx[["a", "b"]].to_dict("records"), truth=hy,
                              info={"target": "y"})


def test_quantization_gate_fails_a_clear_drop() -> None:
    from reprise.registry._optimize import quantization_gate

    good, bad, held = _degraded_pair()
    gate = quantization_gate(good, bad, [], held, max_drop=0.005)
    assert gate["verdict"] == "fail" and gate["passed"] is False
    for r in gate["results"]:
        assert r["drop"] == pytest.approx(r["native"] - r["quantized"])
        assert r["verdict"] == "fail" and r["drop_ci_low"] > 0.005, r
        assert "exceeds 0.5 points" in r["reason"]
    # the same rows the other way round: a clear gain passes
    assert quantization_gate(bad, good, [], held, max_drop=0.005)["verdict"] == "pass"


def test_quantization_gate_on_regression_uses_r2_and_its_interval() -> None:
    from sklearn.linear_model import LinearRegression

    from reprise.registry._holdout import Holdout
    from reprise.registry._optimize import quantization_gate

    x, _ = _numeric()
    target = x["a"] * 2 + 1 + np.random.default_rng(0).normal(scale=0.5, size=len(x))
    good = package_model(LinearRegression().fit(x, target), sample=x, task="regression")
    bad = package_model(LinearRegression().fit(x[["b"]].assign(a=0.0)[["a", "b"]], target),
                        sample=x, task="regression")
    held = Holdout(rows=x.to_dict("records"), truth=target.to_numpy(), info={})
    gate = quantization_gate(good, bad, [], held, max_drop=0.005)
    (r2,) = gate["results"]
    assert r2["metric"] == "r2" and r2["ci_method"] == "bootstrap-t"
    assert gate["unseen_change_bound"] is None and "Clopper" not in gate["rule"]
    assert r2["verdict"] == "fail" and r2["drop_ci_low"] > 0.005
    same = quantization_gate(good, good, [], held, max_drop=0.005)
    assert same["verdict"] == "pass" and same["results"][0]["drop_ci_high"] == 0.0


def test_quantization_gate_intervals_are_reproducible_with_the_seed() -> None:
    from reprise.registry._optimize import quantization_gate

    good, bad, held = _degraded_pair()
    one = quantization_gate(good, bad, [], held, max_drop=0.005, seed=7, resamples=400)
    assert one == quantization_gate(good, bad, [], held, max_drop=0.005, seed=7,
                                    resamples=400)
    other = quantization_gate(good, bad, [], held, max_drop=0.005, seed=8, resamples=400)
    assert other["seed"] == 8 and "seed 8" in other["method"]
    a, b = one["results"][0], other["results"][0]
    assert a["drop"] == b["drop"]  # the point estimate does not depend on the resamples
    assert (a["drop_ci_low"], a["drop_ci_high"]) != (b["drop_ci_low"], b["drop_ci_high"])


def test_quantization_gate_failure_blocks_promotion(ws: Any) -> None:
    net, prep, x, y = _mlp()
    register_package("mlp", package_model(net, sample=x, target=y, preprocessing=prep,
                                          evaluation=_gates()), workspace=ws)
    # without a holdout the basis is agreement with the native labels (native: 1.0), so
    # a gate that demands a gain of 1 point cannot pass
    rec = optimize("mlp", 1, quantize="dynamic-int8", max_drop=-0.01, workspace=ws)
    gate = load_model(f"mlp:{rec.version}", workspace=ws).card["onnx"]["quantization"]["gate"]
    assert gate["basis"].startswith("agreement") and gate["passed"] is False
    assert gate["verdict"] == "fail"
    # the native model agrees with itself: the drop is >= 0, its lower bound above -0.01
    assert all(r["drop_ci_low"] >= 0 > r["max_drop"] for r in gate["results"])
    assert rec.metrics["gates_passed"] is False
    with pytest.raises(UserError, match="gates failed"):
        promote("mlp", rec.version, "production", workspace=ws)


def test_bad_arguments(ws: Any) -> None:
    model, x, _ = _sklearn("logistic")
    register_package("m", package_model(model, sample=x), workspace=ws)
    with pytest.raises(UserError, match="quantize must be"):
        optimize("m", 1, quantize="int4", workspace=ws)
    with pytest.raises(UserError, match="atol"):
        optimize("m", 1, atol=0, workspace=ws)
    with pytest.raises(UserError, match="runtime must be"):
        read_package(_folder(ws, "m", 1), runtime="gpu")


def test_export_leaves_the_model_in_eval_mode() -> None:
    import torch

    from reprise.registry._onnx import convert

    x, y = _numeric()
    net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Dropout(0.5),
                              torch.nn.Linear(4, 2)).eval()
    pkg = package_model(net, sample=x, target=y)
    convert(pkg)
    assert not pkg.model.training  # a leaked train() would make native predictions random


def _scaler_graph(offset: list[float], scale: list[float], width: int, elem: int) -> Any:
    from onnx import TensorProto, helper

    node = helper.make_node("Scaler", ["X"], ["Y"], domain="ai.onnx.ml", name="scaler",
                            offset=offset, scale=scale)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", elem, [None, width])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT,
                                                             [None, width])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                   helper.make_opsetid("ai.onnx.ml", 3)])


_finite32 = {"allow_nan": False, "allow_infinity": False, "width": 32}


@given(data=st.data(), width=st.integers(1, 6), rows=st.integers(1, 20),
       broadcast=st.booleans())
@settings(max_examples=60, deadline=None)
def test_a_scaler_as_sub_and_mul_answers_bit_for_bit_the_same(data: Any, width: int, rows: int,
                                                            broadcast: bool) -> None:
    """The law behind standard_scalers: ONNX Runtime's Scaler kernel and a Sub then a Mul
    compute the same float32 numbers, for any offsets and scales, one per column or one
    for all of them."""
    from onnx import TensorProto

    from reprise.registry._onnx import make_session, standard_scalers

    n = 1 if broadcast else width
    values = st.floats(-1e6, 1e6, **_finite32)
    offset = data.draw(st.lists(values, min_size=n, max_size=n))
    scale = data.draw(st.lists(st.floats(-1e3, 1e3, **_finite32), min_size=n, max_size=n))
    x = np.asarray(data.draw(st.lists(values, min_size=rows * width, max_size=rows * width)),
                   dtype=np.float32).reshape(rows, width)
    before = _scaler_graph(offset, scale, width, TensorProto.FLOAT)
    after = _scaler_graph(offset, scale, width, TensorProto.FLOAT)
    assert standard_scalers(after) == 1
    assert [n.op_type for n in after.graph.node] == ["Sub", "Mul"]
    want = make_session(before.SerializeToString()).run(None, {"X": x})[0]
    got = make_session(after.SerializeToString()).run(None, {"X": x})[0]
    assert got.dtype == want.dtype == np.float32
    assert np.array_equal(got, want, equal_nan=True)


def test_a_scaler_over_doubles_is_left_to_the_ml_kernel() -> None:
    """Scaler casts a double input to float first; a Sub over doubles would not: left."""
    from onnx import TensorProto

    from reprise.registry._onnx import standard_scalers

    graph = _scaler_graph([1.0, 2.0], [0.5, 0.25], 2, TensorProto.DOUBLE)
    assert standard_scalers(graph) == 0
    assert [n.op_type for n in graph.graph.node] == ["Scaler"]


def _packaged(kind: str) -> Any:
    """The demo-like MLP with its fitted scaler (``mlp``), or a :func:`_sklearn` model."""
    if kind == "mlp":
        net, prep, x, y = _mlp()
        return package_model(net, sample=x, target=y, preprocessing=prep, evaluation=_gates())
    model, x, _ = _sklearn(kind)
    return package_model(model, sample=x, evaluation=_gates())


@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_converted_graphs_carry_no_ml_scaler(ws: Any, kind: str) -> None:
    """A StandardScaler reaches the stored graph as the default domain's Sub and Mul, the
    Mul folded into the network's first layer where one follows (a torch package)."""
    import onnx

    register_package("m", _packaged(kind), workspace=ws)
    rec = optimize("m", 1, workspace=ws)
    loaded = load_model(f"m:{rec.version}", workspace=ws)
    ops = [n.op_type for n in onnx.load_from_string(loaded.onnx).graph.node]
    rewrites = loaded.onnx_info["rewrites"]
    if kind == "mlp":
        assert ops[:2] == ["Sub", "Gemm"] and "Mul" not in ops and "Scaler" not in ops
        assert rewrites == ["scaler-as-sub-mul", "scale-folded-into-gemm"]
    else:
        assert ops == ["Sub", "Mul", "LinearClassifier"]
        assert rewrites == ["scaler-as-sub-mul"]
    assert rec.meta["onnx"]["parity"] is True


def _scale_gemm_graph(scale: list[float], w: Any, trans_b: int) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    k = w.shape[1] if trans_b else w.shape[0]
    n = w.shape[0] if trans_b else w.shape[1]
    nodes = [helper.make_node("Mul", ["X", "s"], ["t"]),
             helper.make_node("Gemm", ["t", "W", "b"], ["Y"], transB=trans_b)]
    inits = [numpy_helper.from_array(np.asarray(scale, dtype=np.float32), "s"),
             numpy_helper.from_array(w.astype(np.float32), "W"),
             numpy_helper.from_array(np.linspace(-1, 1, n).astype(np.float32), "b")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, [None, k])], [helper.make_tensor_value_info(
            "Y", TensorProto.FLOAT, [None, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@given(data=st.data(), k=st.integers(1, 8), n=st.integers(1, 5), trans_b=st.sampled_from([0, 1]),
       broadcast=st.booleans())
@settings(max_examples=40, deadline=None)
def test_a_scale_folded_into_its_gemm_answers_within_float32_rounding(
        data: Any, k: int, n: int, trans_b: int, broadcast: bool) -> None:
    """The fold's law: Gemm(x * s, W) and Gemm(x, W * s) agree to float32 rounding (a few
    units in the last place of the largest term), for scales per column or one for all,
    W stored either way round; the Mul and its scale are gone."""
    from reprise.registry._onnx import fold_scales, make_session

    finite = st.floats(-100, 100, **_finite32)
    scale = data.draw(st.lists(st.floats(-1e3, 1e3, **_finite32),
                               min_size=1 if broadcast else k, max_size=1 if broadcast else k))
    w = np.asarray(data.draw(st.lists(finite, min_size=k * n, max_size=k * n)),
                   dtype=np.float32).reshape((n, k) if trans_b else (k, n))
    x = np.asarray(data.draw(st.lists(finite, min_size=3 * k, max_size=3 * k)),
                   dtype=np.float32).reshape(3, k)
    before = _scale_gemm_graph(scale, w, trans_b)
    after = _scale_gemm_graph(scale, w, trans_b)
    assert fold_scales(after) == 1
    assert [nd.op_type for nd in after.graph.node] == ["Gemm"]
    assert "s" not in {i.name for i in after.graph.initializer}
    want = make_session(before.SerializeToString()).run(None, {"X": x})[0].astype(np.float64)
    got = make_session(after.SerializeToString()).run(None, {"X": x})[0].astype(np.float64)
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), (k,))
    wk = (w.T if trans_b else w).astype(np.float64)  # (k, n)
    terms = np.abs(x.astype(np.float64)[:, :, None] * s[None, :, None] * wk[None])
    # each side: one rounding per product (x*s, or W*s) and a sum of k terms and the bias
    # (|b| <= 1), each within (k + 2) units of float32 rounding of the terms' magnitude
    bound = (2 * k + 6) * np.finfo(np.float32).eps * (terms.sum(axis=1) + 1)
    assert np.all(np.abs(got - want) <= bound)


def test_a_scale_read_elsewhere_or_a_gemm_without_constant_weights_is_not_folded() -> None:
    from onnx import helper

    from reprise.registry._onnx import fold_scales

    graph = _scale_gemm_graph([2.0, 3.0], np.ones((2, 2)), 0)
    graph.graph.output.append(helper.make_tensor_value_info("t", 1, [None, 2]))  # read out
    assert fold_scales(graph) == 0 and len(graph.graph.node) == 2
    graph = _scale_gemm_graph([2.0, 3.0], np.ones((2, 2)), 0)
    graph.graph.node[1].input[1] = "X"  # weights that are not a constant
    assert fold_scales(graph) == 0
    graph = _scale_gemm_graph([2.0, 3.0], np.ones((2, 2)), 0)
    graph.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 1  # x [n, 1] * s [2]
    assert fold_scales(graph) == 0  # the Mul grows its input: folding would change it
    for listed in ("s", "W"):  # a constant a caller may feed (an input) or read (an output)
        for where in ("input", "output"):
            graph = _scale_gemm_graph([2.0, 3.0], np.ones((2, 2)), 0)
            getattr(graph.graph, where).append(helper.make_tensor_value_info(listed, 1, None))
            assert fold_scales(graph) == 0, (listed, where)
    graph = _scale_gemm_graph([2.0, 3.0], np.ones((2, 2)), 0)  # names read in a subgraph
    branch = helper.make_graph([helper.make_node("Identity", ["t"], ["z"])], "b", [],
                               [helper.make_tensor_value_info("z", 1, None)])
    graph.graph.node.append(helper.make_node("If", ["c"], ["o"], then_branch=branch,
                                             else_branch=branch))
    assert fold_scales(graph) == 0


def test_a_scaler_with_lengths_the_runtime_refuses_is_left_as_it_is() -> None:
    from onnx import TensorProto

    from reprise.registry._onnx import standard_scalers

    graph = _scaler_graph([1.0], [0.5, 0.25, 2.0], 3, TensorProto.FLOAT)
    assert standard_scalers(graph) == 0 and graph.graph.node[0].op_type == "Scaler"


def test_a_folded_graph_that_fails_to_load_is_converted_again_unfolded(
        ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from reprise.registry import _onnx

    net, prep, x, y = _mlp()
    register_package("mlp", package_model(net, sample=x, target=y, preprocessing=prep,
                                          evaluation=_gates()), workspace=ws)
    real = _onnx.make_session
    graphs: list[bytes] = []

    def first_fails(graph: bytes) -> Any:
        graphs.append(graph)
        if len(graphs) == 1:
            raise RuntimeError("injected: the folded graph does not load")
        return real(graph)

    monkeypatch.setattr(_onnx, "make_session", first_fails)
    rec = optimize("mlp", 1, workspace=ws)
    assert load_model(f"mlp:{rec.version}", workspace=ws).onnx_info["rewrites"] == \
        ["scaler-as-sub-mul"]


def test_a_folded_graph_failing_parity_is_converted_again_unfolded(
        ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Near the tolerance the fold's rounding may tip the parity check: the graph as
    converted, unfolded, is checked then, and registered when it passes."""
    import onnx

    from reprise.registry import _optimize

    net, prep, x, y = _mlp()
    register_package("mlp", package_model(net, sample=x, target=y, preprocessing=prep,
                                          evaluation=_gates()), workspace=ws)
    real = _optimize.prove_parity
    seen: list[list[str]] = []

    def folded_fails(native: Any, onnx_pkg: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        report = real(native, onnx_pkg, *args, **kwargs)
        seen.append(onnx_pkg.onnx_info["rewrites"])
        if "scale-folded-into-gemm" in onnx_pkg.onnx_info["rewrites"]:
            return {**report, "passed": False, "problem": "injected"}
        return report

    monkeypatch.setattr(_optimize, "prove_parity", folded_fails)
    rec = optimize("mlp", 1, workspace=ws)
    assert seen == [["scaler-as-sub-mul", "scale-folded-into-gemm"], ["scaler-as-sub-mul"]]
    loaded = load_model(f"mlp:{rec.version}", workspace=ws)
    assert [n.op_type for n in onnx.load_from_string(loaded.onnx).graph.node][:3] == \
        ["Sub", "Mul", "Gemm"]
    assert loaded.onnx_info["rewrites"] == ["scaler-as-sub-mul"]


@pytest.mark.parametrize("kind", ["columns", "mlp"])
def test_optimizing_twice_is_the_same_graph_and_the_same_version(ws: Any, kind: str) -> None:
    """The graph is a function of the package (skl2onnx names a graph with a random uuid
    unless given a name, and merging two graphs writes both names into the doc string):
    the variant's bytes, hence its manifest hash, are the same on every conversion, so
    optimising a version again finds the variant already registered."""
    from reprise.registry._onnx import convert

    pkg = _packaged(kind)
    assert convert(pkg)[0] == convert(pkg)[0]
    assert convert(pkg, fold=False)[0] == convert(pkg, fold=False)[0]
    register_package("m", pkg, workspace=ws)
    first, again = optimize("m", 1, workspace=ws), optimize("m", 1, workspace=ws)
    assert (first.version, first.package_hash) == (again.version, again.package_hash)
    assert [v["version"] for v in describe_model("m", workspace=ws)["versions"]] == [1, 2]
    assert first.meta["onnx"]["rewrites"] == again.meta["onnx"]["rewrites"] != []
    if kind == "mlp":  # a quantised variant too: its own version, found again
        from reprise.registry._optimize import optimize_variant

        q1, created = optimize_variant("m", 1, quantize="dynamic-int8", workspace=ws)
        q2, created_again = optimize_variant("m", 1, quantize="dynamic-int8", workspace=ws)
        assert (created, created_again) == (True, False)
        assert q1.version == q2.version == 3 and q1.package_hash == q2.package_hash


def test_the_quantiser_advice_filter_stays_while_any_quantisation_runs() -> None:
    """ONNX Runtime's advice is dropped on the root logger while a quantisation runs; with
    two at once (threads), the first to finish must not take the filter from the other."""
    import logging

    from reprise.registry._optimize import _advice_filter, _no_preprocessing_advice

    root = logging.getLogger()
    _advice_filter(+1)
    _advice_filter(+1)
    try:
        _advice_filter(-1)
        assert _no_preprocessing_advice in root.filters
    finally:
        _advice_filter(-1)
    assert _no_preprocessing_advice not in root.filters
    advice = logging.LogRecord("root", logging.WARNING, __file__, 1, "Please consider to run "
                               "pre-processing before quantization. Refer to ...", None, None)
    other = logging.LogRecord("root", logging.WARNING, __file__, 1, "something else", None,
                              None)
    assert not _no_preprocessing_advice(advice) and _no_preprocessing_advice(other)


# -- running: the batch conversion -------------------------------------------------------

def test_a_batch_matrix_is_converted_in_threads_the_same_as_a_request_s(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Above _SPLIT_VALUES the conversion and the transpose are split between threads and
    write this thread's scratch arrays; the numbers are those of the simple path, a
    shorter batch converts into views of the same arrays, two threads converting at once
    each get their own, and so do two matrix inputs of one run."""
    import threading

    from reprise.registry import _onnx

    monkeypatch.setattr(_onnx, "threads", lambda: 3)  # an odd split of columns and rows
    monkeypatch.setattr(_onnx, "_SPLIT_VALUES", 1000)
    rng = np.random.default_rng(1)

    def want(cols: list[np.ndarray]) -> np.ndarray:
        return np.column_stack(cols).astype(np.float32)

    batches = [[rng.normal(size=1001) * 100 for _ in range(7)] for _ in range(4)]
    assert np.array_equal(_onnx._matrix(batches[0]), want(batches[0]))
    small = [c[:5] for c in batches[0]]  # below the split: converted in this thread
    assert np.array_equal(_onnx._matrix(small), want(small))
    shorter = [c[:600] for c in batches[1]]  # a file's last chunk: views of the same arrays
    got = _onnx._matrix(shorter)
    assert got.flags.c_contiguous and np.array_equal(got, want(shorter))
    assert np.shares_memory(got, _onnx._matrix(batches[0]))
    errors: list[str] = []

    def convert(i: int) -> None:
        for _ in range(30):
            got = _onnx._matrix(batches[i]).copy()
            if not np.array_equal(got, want(batches[i])):
                errors.append(f"batch {i}")
    workers = [threading.Thread(target=convert, args=(i,)) for i in (2, 3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    # two matrix inputs of one run, the same width: each its own arrays
    io = {"inputs": [{"name": n, "kind": "matrix", "dtype": "float",
                      "columns": [f"{n}{i}" for i in range(7)]} for n in ("A", "B")]}
    cols = {**{f"A{i}": batches[0][i] for i in range(7)},
            **{f"B{i}": batches[1][i] for i in range(7)}}
    fed = _onnx.feeds(io, cols)
    assert not np.shares_memory(fed["A"], fed["B"])
    assert np.array_equal(fed["A"], want(batches[0]))
    assert np.array_equal(fed["B"], want(batches[1]))


def test_a_torch_package_predicts_a_threaded_batch_as_it_predicts_its_rows(
        ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's shape (a scaler in front of a network): a batch converted in threads
    into the scratch arrays answers bit for bit what the same rows answer through the
    simple path, twice in a row (the second batch reuses the arrays)."""
    from reprise.registry import _onnx

    register_package("mlp", _packaged("mlp"), workspace=ws)
    rec = optimize("mlp", 1, workspace=ws)
    pkg = read_package(_folder(ws, "mlp", rec.version), runtime="onnx")
    rng = np.random.default_rng(0)
    batches = [{c: rng.normal(size=40_000) for c in pkg.signature.names} for _ in range(2)]
    monkeypatch.setattr(_onnx, "_SPLIT_VALUES", 1 << 40)
    want = [pkg.predict(b)["probabilities"] for b in batches]
    monkeypatch.setattr(_onnx, "threads", lambda: 2)
    monkeypatch.setattr(_onnx, "_SPLIT_VALUES", 10_000)  # 2 columns x 40,000 rows: threads
    for b, w in zip(batches, want, strict=True):
        assert np.array_equal(pkg.predict(b)["probabilities"], w)
    assert pkg.onnx_info["inputs"][0]["name"] in _onnx._local.scratch  # the threaded path
