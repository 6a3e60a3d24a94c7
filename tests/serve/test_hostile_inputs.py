"""Requests that cost far more than they weigh, and URLs or values that used to reach a
500 or a 200 they should not (issue 20, items 1, 2, 5, 6 and 7), in process."""

from __future__ import annotations

import json
import math
import struct
import tracemalloc
from typing import Any

import pytest

from reprise.registry import Field, Signature
from reprise.serve import Settings
from reprise.serve._oip import check_infer
from tests.serve.fakes import FakeModel, FakeSource, run, serving

GOOD = {"x": 1.5, "y": 3, "plan": "gold"}
X = {"name": "x", "shape": [1], "datatype": "FP64", "data": [1.0]}
Y = {"name": "y", "shape": [1], "datatype": "INT64", "data": [3]}
PLAN = {"name": "plan", "shape": [1], "datatype": "BYTES", "data": ["gold"]}


def _session(*requests: tuple[str, str, Any], source: Any = None,
             settings: Settings | None = None, refs: list[str] | None = None) -> list[Any]:
    """Each request's response, then the /metrics text, from one started server."""
    async def main() -> list[Any]:
        async with serving(source or FakeSource(), refs or ["churn@production", "churn:2"],
                           settings) as (c, _):
            out = [await (c.get(path) if method == "GET" else c.post(path, json=body))
                   for method, path, body in requests]
            return [*out, (await c.get("/metrics")).text]
    return run(main())


def _peak_bytes(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- item 1: /v1 records with distinct keys ----------------------------------------------

def _distinct_keys(n: int) -> list[dict[str, Any]]:
    return [{f"k{i}": 0} for i in range(n)]


def test_distinct_keys_are_refused_in_linear_memory_naming_a_few() -> None:
    sig = FakeModel("m", 1).signature
    records = _distinct_keys(3000)
    # one column per key, each 3000 long, was 9 million list slots (~72 MB) and as many
    # "unexpected" errors; now the columns are the model's inputs only
    peak = _peak_bytes(lambda: sig.check_records(records))
    assert peak < 8_000_000, peak
    checked = sig.check_records(records)
    unexpected = [e for e in checked.errors if e.problem == "unexpected"]
    assert [e.field for e in unexpected[:10]] == [f"k{i}" for i in range(10)]
    assert unexpected[10].field == "$" and "2990 more" in unexpected[10].got
    assert len(unexpected) == 11 and checked.rows == 3000


def test_distinct_keys_answer_422_with_a_small_body_and_are_ignored_when_allowed() -> None:
    body = {"records": [{**GOOD, f"k{i}": 0} for i in range(2000)]}
    refused, _ = _session(("POST", "/v1/models/churn/predict", body))
    assert refused.status_code == 422 and len(refused.content) < 4000
    assert {f["problem"] for f in refused.json()["fields"]} == {"unexpected"}
    ignored, _ = _session(("POST", "/v1/models/churn/predict", body),
                          settings=Settings(poll_interval=0.05, extra_columns="ignore"))
    assert ignored.status_code == 200 and len(ignored.json()["predictions"]) == 2000


def test_records_missing_a_column_in_some_rows_still_name_the_rows() -> None:
    checked = FakeModel("m", 1).signature.check_records([GOOD, {"x": 1.0, "plan": "gold"}])
    assert [(e.field, e.problem, e.row) for e in checked.errors] == [("y", "missing", 1)]


# -- item 2: a declared shape with no data behind it -------------------------------------

class _Model:
    def __init__(self, extra: str) -> None:
        self.signature = FakeModel("m", 1).signature.with_policy(extra_columns=extra)


@pytest.mark.parametrize("extra", ["reject", "ignore"])
def test_an_unknown_oip_input_allocates_nothing_from_its_shape(extra: str) -> None:
    ghost = {"name": "ghost", "shape": [10**7, 0], "datatype": "FP64", "data": []}
    payload = {"inputs": [X, Y, PLAN, ghost]}

    def check() -> Any:
        try:
            return check_infer(_Model(extra), payload)  # type: ignore[arg-type]
        except Exception as exc:
            return exc
    peak = _peak_bytes(check)
    assert peak < 2_000_000, peak  # [None] * 10**7 was 80 MB
    outcome = check()
    if extra == "reject":
        assert getattr(outcome, "status", None) == 400
        assert "unexpected input 'ghost'" in outcome.message
    else:
        checked, _, _ = outcome
        assert checked.ok and checked.rows == 1


def test_a_known_oip_input_declaring_rows_without_data_is_400() -> None:
    hollow = {**X, "shape": [10**9, 0], "data": []}
    r, _ = _session(("POST", "/v2/models/churn/infer", {"inputs": [hollow, Y, PLAN]}))
    assert r.status_code == 400 and list(r.json()) == ["error"]
    assert "input 'x'" in r.json()["error"]


# -- item 5: versions and names in the URL -----------------------------------------------

@pytest.mark.parametrize("version", ["²", "١", "１", "1%0A", "-1", "+1", "%201", "1.0"])
def test_versions_are_ascii_digits_only_and_never_a_500(version: str) -> None:
    v1, v2, meta, ready, _ = _session(
        ("POST", f"/v1/models/churn/versions/{version}/predict", [GOOD]),
        ("POST", f"/v2/models/churn/versions/{version}/infer", {"inputs": [X, Y, PLAN]}),
        ("GET", f"/v2/models/churn/versions/{version}", None),
        ("GET", f"/v2/models/churn/versions/{version}/ready", None))
    for r in (v1, v2, meta, ready):
        assert r.status_code == 404, (r.request.url, r.text)
        assert r.json()["error"].startswith("the version in the URL of model 'churn' is not")


def test_an_encoded_slash_stays_in_the_name_and_the_name_rule_applies() -> None:
    sneaky, newline, dots, good, _ = _session(
        ("POST", "/v1/models/churn%2Fversions%2F2/predict", [GOOD]),
        ("POST", "/v1/models/churn%0A/predict", [GOOD]),
        ("POST", "/v2/models/..%2F..%2Fetc/infer", {"inputs": [X, Y, PLAN]}),
        ("POST", "/v1/models/ch%75rn/versions/%32/predict", [GOOD]))
    assert sneaky.status_code == 400 and "model name" in sneaky.json()["error"]
    assert newline.status_code == 400 and dots.status_code == 400
    assert list(dots.json()) == ["error"] and "etc" not in dots.json()["error"]
    assert good.status_code == 200 and good.json()["version"] == 2


@pytest.mark.parametrize("path", [
    "/v1/models/%FF/predict", "/v1/models/%00/predict", "/v1/models/%2E%2E/predict",
    "/v2/models/%FF/infer", "/v2/models/churn/versions/%FF/infer",
    "/v1/models/churn/versions/%C2%B2/predict", "/v1/models/churn/versions/1%2F2/predict",
    "/v1/models/churn/versions/" + "9" * 40 + "/predict", "/v1/models/" + "a" * 300 + "/predict",
    "/v2/models/%FF", "/v2/models/churn/versions/%C2%B2/ready", "/v2/models/%0A/ready"])
def test_no_url_reaches_a_500(path: str) -> None:
    for r in _session(("POST" if path.endswith(("predict", "infer")) else "GET", path,
                       [GOOD]))[:1]:
        assert 400 <= r.status_code < 500 and list(r.json()) == ["error"], (path, r.text)


def test_registry_refs_take_ascii_version_digits_only() -> None:
    from reprise.core.errors import UserError
    from reprise.registry._registry import split_ref

    assert split_ref("m:12") == ("m", None, 12)
    for ref in ("m:²", "m:１", "m\n:1", "m\n"):
        with pytest.raises(UserError):
            split_ref(ref)


# -- item 6: non-finite inputs and outputs -----------------------------------------------

class _Blowup(FakeModel):
    """``score`` is ``x * 1e10`` (infinity for a huge x) and ``p`` is ``score - score``
    (NaN then): a model whose arithmetic overflows, as ``exp`` does in a classifier."""

    def __init__(self, float_dtype: str = "float64") -> None:
        sig = Signature(inputs=[Field("x", "float")],
                        outputs=[Field("score", "float"), Field("p", "float")])
        super().__init__("churn", 1, signature=sig, example=[{"x": 1.0}])
        self.float_dtype = float_dtype

    def predict(self, columns: dict[str, Any]) -> dict[str, Any]:
        scores = [x * 1e10 for x in columns["x"].tolist()]
        return {"p": [s - s for s in scores], "score": scores}


def _blowup(float_dtype: str = "float64") -> FakeSource:
    return FakeSource({"churn": {1: _Blowup(float_dtype)}}, {"churn@production": 1})


def test_non_finite_outputs_are_422_naming_the_output_and_counted() -> None:
    ok, v1, oip, metrics = _session(
        ("POST", "/v1/models/churn/predict", [{"x": 2.0}]),
        ("POST", "/v1/models/churn/predict", [{"x": 2.0}, {"x": 1e308}]),
        ("POST", "/v2/models/churn/infer",
         {"inputs": [{"name": "x", "shape": [1], "datatype": "FP64", "data": [1e308]}]}),
        source=_blowup(), refs=["churn@production"])
    assert ok.status_code == 200
    assert v1.status_code == 422 and "output 'p'" in v1.json()["error"]
    assert "row 1" in v1.json()["error"] and "1e+308" not in v1.text
    assert oip.status_code == 422 and list(oip.json()) == ["error"]
    assert ('reprise_non_finite_values_total{field="p",model="churn",version="1",'
            'where="output"} 2.0') in metrics


def test_non_finite_binary_inputs_are_422_naming_the_input() -> None:
    head = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "FP64",
                                   "parameters": {"binary_data_size": 16}}]}).encode()

    async def main() -> tuple[Any, str]:
        async with serving(_blowup(), ["churn@production"]) as (c, _):
            r = await c.post("/v2/models/churn/infer",
                             content=head + struct.pack("<2d", 1.0, math.nan),
                             headers={"inference-header-content-length": str(len(head))})
            return r, (await c.get("/metrics")).text
    r, metrics = run(main())
    assert r.status_code == 422 and "input 'x' row 1" in r.json()["error"]
    assert 'where="input"} 1.0' in metrics


def test_inputs_are_checked_as_the_model_converts_them() -> None:
    big = [{"x": 1e39}]  # finite as float64, infinity as float32
    f64, _ = _session(("POST", "/v1/models/churn/predict", big), source=_blowup("float64"),
                      refs=["churn@production"])
    f32, _ = _session(("POST", "/v1/models/churn/predict", big), source=_blowup("float32"),
                      refs=["churn@production"])
    assert f64.status_code == 200 and f64.json()["predictions"][0]["score"] == 1e49
    assert f32.status_code == 422 and "input 'x' row 0" in f32.json()["error"]
    assert "float32" in f32.json()["error"]


# -- item 7: the OIP datatype against the values -----------------------------------------

@pytest.mark.parametrize(("tensor", "words"), [
    ({**X, "datatype": "INT8", "data": [1e30]}, "INT8 cannot hold element 0"),
    ({**X, "datatype": "INT8", "data": [128]}, "INT8 cannot hold element 0"),
    ({**X, "datatype": "UINT8", "data": [-5]}, "UINT8 cannot hold element 0"),
    ({**X, "datatype": "FP16", "data": [1e300]}, "FP16 cannot hold element 0"),
    ({**X, "datatype": "FP32", "data": [-1e39]}, "FP32 cannot hold element 0"),
    ({**X, "datatype": "INT32", "data": [1.5]}, "element 0 has a fraction"),
    ({**X, "datatype": "INT32", "data": [True]}, "INT32 elements must be integers"),
    ({**Y, "datatype": "INT64", "data": ["3"]}, "INT64 elements must be integers"),
    ({**PLAN, "data": [7]}, "BYTES elements must be strings"),
])
def test_values_must_fit_the_declared_datatype(tensor: dict[str, Any], words: str) -> None:
    others = [t for t in (X, Y, PLAN) if t["name"] != tensor["name"]]
    r, _ = _session(("POST", "/v2/models/churn/infer", {"inputs": [tensor, *others]}))
    assert r.status_code == 400 and list(r.json()) == ["error"], r.text
    assert words in r.json()["error"] and f"input '{tensor['name']}'" in r.json()["error"]
    assert "1e+30" not in r.text and "1e+300" not in r.text


def test_values_that_fit_their_datatype_are_accepted() -> None:
    r, _ = _session(("POST", "/v2/models/churn/infer", {"inputs": [
        {**X, "shape": [2], "datatype": "INT8", "data": [-128, 2.0]},
        {**Y, "shape": [2], "datatype": "UINT8", "data": [255, 0]},
        {**PLAN, "shape": [2], "data": ["gold", "basic"]}]}))
    assert r.status_code == 200, r.text



class _F32Model:
    """What ``check_inputs`` reads of a served model: a float32 one with three float inputs
    (one of them absent from some requests) and an integer one."""

    def __init__(self) -> None:
        self.name, self.version = "churn", 1
        self.servable = type("S", (), {"float_dtype": "float32"})()
        self.signature = Signature(inputs=[Field("a", "float"), Field("n", "int"),
                                           Field("b", "float"), Field("c", "float")],
                                   outputs=[Field("p", "float")])
        self.counted: list[tuple[str, str]] = []
        self.metrics = self

    def non_finite(self, model: str, version: str, where: str, field: str) -> None:
        self.counted.append((where, field))


@pytest.mark.parametrize(("columns", "bad"), [
    ({"a": [1.0, 2.0], "n": [10**40, 1], "b": [3.0, 4.0], "c": [0.0, -3.4e38]}, None),
    ({"a": [1.0, 2.0], "b": [3.0, 4.0]}, None),  # c absent: the signature check's business
    ({"a": [], "b": [], "c": []}, None),
    ({"a": [1.0, 2.0], "b": [3.0, 1e39], "c": [math.nan, 0.0]}, "input 'b' row 1"),
    ({"a": [1.0, 2.0], "b": [3.0, 4.0], "c": [0.0, -1e39]}, "input 'c' row 1"),
    ({"a": [1.0, None], "b": [3.0, 4.0], "c": [0.0, math.inf]}, "input 'c' row 1"),
    ({"a": [1.0, 2.0], "b": [-math.inf, 4.0], "c": [1e308, 1e308]}, "input 'b' row 0"),
])
def test_float32_inputs_are_checked_over_all_columns_naming_the_first_bad(
        columns: dict[str, Any], bad: str | None) -> None:
    from reprise.serve._finite import check_inputs
    from reprise.serve._http import HTTPError

    model: Any = _F32Model()
    if bad is None:
        check_inputs(model, columns)
        assert model.counted == []
        return
    with pytest.raises(HTTPError) as info:
        check_inputs(model, columns)
    assert bad in info.value.message and "float32" in info.value.message
    assert model.counted == [("input", bad.split("'")[1])]
