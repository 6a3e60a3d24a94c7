"""The Open Inference Protocol's binary tensor extension (Triton's ``binary_tensor_data``)
with raw HTTP requests: binary inputs and outputs, compressed bodies, and every way a
hostile or broken client can get the framing wrong (each a 400 naming the problem)."""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from typing import Any

import numpy as np
import pytest

from reprise.serve import Settings
from tests.serve.fakes import FakeSource, run, score, serving

INFER = "/v2/models/churn/infer"
F32 = np.array([1.0, 2.0], "<f4").tobytes()
I64 = np.array([3, 70], "<i8").tobytes()


def strings(*items: bytes) -> bytes:
    """BYTES elements as the extension frames them: a 4-byte length, then the bytes."""
    return b"".join(struct.pack("<I", len(s)) + s for s in items)


PLAN = strings(b"gold", b"basic")


def tensor(name: str, datatype: str, raw: bytes, shape: list[int] | None = None,
           size: Any = None) -> tuple[dict[str, Any], bytes]:
    return ({"name": name, "shape": shape or [2], "datatype": datatype,
             "parameters": {"binary_data_size": len(raw) if size is None else size}}, raw)


def framed(*tensors: tuple[dict[str, Any], bytes], **extra: Any) -> tuple[bytes, str]:
    """(body, Inference-Header-Content-Length): the JSON header, then the raw tensors."""
    head = json.dumps({"inputs": [t for t, _ in tensors], **extra}).encode()
    return head + b"".join(raw for _, raw in tensors), str(len(head))


def churn(**extra: Any) -> tuple[bytes, str]:
    return framed(tensor("x", "FP32", F32), tensor("y", "INT64", I64),
                  tensor("plan", "BYTES", PLAN), **extra)


def post(*requests: tuple[bytes, dict[str, str]], settings: Settings | None = None,
         path: str = INFER) -> list[Any]:
    async def main() -> list[Any]:
        async with serving(FakeSource(), ["churn@production"], settings) as (c, _):
            return [await c.post(path, content=body, headers=headers)
                    for body, headers in requests]
    return run(main())


def outputs(response: Any) -> dict[str, Any]:
    """Each output's values, read from JSON ``data`` or from the binary part."""
    size = response.headers.get("inference-header-content-length")
    if size is None:
        return {o["name"]: o["data"] for o in response.json()["outputs"]}
    head, offset = json.loads(response.content[:int(size)]), int(size)
    out: dict[str, Any] = {}
    for o in head["outputs"]:
        if "data" in o:
            out[o["name"]] = o["data"]
            continue
        raw = response.content[offset:offset + o["parameters"]["binary_data_size"]]
        offset += len(raw)
        if o["datatype"] == "BYTES":
            out[o["name"]] = _unframe(raw)
        else:
            out[o["name"]] = np.frombuffer(raw, {"FP64": "<f8", "INT64": "<i8"}[
                o["datatype"]]).tolist()
    assert offset == len(response.content)
    return out


def _unframe(raw: bytes) -> list[str]:
    items, i = [], 0
    while i < len(raw):
        (n,) = struct.unpack_from("<I", raw, i)
        items.append(raw[i + 4:i + 4 + n].decode())
        i += 4 + n
    return items


EXPECTED = {"score": [score(1.0, 3, "gold", 1), score(2.0, 70, "basic", 1)],
            "label": ["low", "high"]}


def test_binary_inputs_with_json_and_binary_outputs() -> None:
    body, size = churn()
    all_binary, all_size = churn(parameters={"binary_data_output": True})
    as_json, as_binary = post((body, {"inference-header-content-length": size}),
                              (all_binary, {"inference-header-content-length": all_size}))
    assert as_json.status_code == 200 and outputs(as_json) == EXPECTED
    assert as_json.headers["content-type"] == "application/json"
    assert as_binary.status_code == 200, as_binary.text
    assert as_binary.headers["content-type"] == "application/octet-stream"
    assert outputs(as_binary) == EXPECTED
    head = json.loads(as_binary.content[:int(as_binary.headers[
        "inference-header-content-length"])])
    assert [o["parameters"] for o in head["outputs"]] == [{"binary_data_size": 16},
                                                          {"binary_data_size": 15}]


def test_binary_output_chosen_per_output_overrides_the_default() -> None:
    body, size = churn(parameters={"binary_data_output": True}, outputs=[
        {"name": "score", "parameters": {"binary_data": False}},
        {"name": "label", "parameters": {"binary_data": True}}])
    (r,) = post((body, {"inference-header-content-length": size}))
    head = json.loads(r.content[:int(r.headers["inference-header-content-length"])])
    assert [("data" in o, "parameters" in o) for o in head["outputs"]] == [(True, False),
                                                                          (False, True)]
    assert outputs(r) == EXPECTED


def test_binary_and_json_inputs_mix_in_one_request() -> None:
    body, size = framed(tensor("x", "FP32", F32),
                        ({"name": "y", "shape": [2], "datatype": "INT64", "data": [3, 70]},
                         b""), tensor("plan", "BYTES", PLAN))
    (r,) = post((body, {"inference-header-content-length": size}))
    assert r.status_code == 200 and outputs(r) == EXPECTED


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_binary_bodies_are_inflated(encoding: str) -> None:
    body, size = churn()
    packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    (r,) = post((packed, {"inference-header-content-length": size,
                          "content-encoding": encoding}))
    assert r.status_code == 200, r.text
    assert outputs(r) == EXPECTED


def test_compressed_bodies_are_bounded_and_checked() -> None:
    bomb = gzip.compress(b"{" + b" " * 1_000_000 + b"}")
    assert len(bomb) < 4096
    big, broken, unknown = post(
        (bomb, {"content-encoding": "gzip"}), (b"not gzip at all", {"content-encoding": "gzip"}),
        (b"{}", {"content-encoding": "br"}), settings=Settings(max_body_bytes=4096))
    assert big.status_code == 413 and "decompressed" in big.json()["error"]
    assert broken.status_code == 400 and "not valid gzip" in broken.json()["error"]
    assert unknown.status_code == 415 and "gzip or deflate" in unknown.json()["error"]
    assert all(list(r.json()) == ["error"] for r in (big, broken, unknown))


def _case(*tensors: tuple[dict[str, Any], bytes], trailer: bytes = b"",
          length: str | None = None, **extra: Any) -> tuple[bytes, dict[str, str]]:
    body, size = framed(*tensors, **extra)
    return body + trailer, {"inference-header-content-length": size if length is None
                            else length}


X, Y, P = tensor("x", "FP32", F32), tensor("y", "INT64", I64), tensor("plan", "BYTES", PLAN)
BAD = {
    "header longer than the body": (_case(X, Y, P, length="99999"), "body has only"),
    "header not a number": (_case(X, Y, P, length="12abc"), "non-negative whole number"),
    "header negative": (_case(X, Y, P, length="-5"), "non-negative whole number"),
    "size does not fit shape": (_case(tensor("x", "FP32", F32[:4]), Y, P), "needs 8 bytes"),
    "size past the body": (_case(tensor("x", "FP32", F32, size=800), Y, P), "only"),
    "size negative": (_case(tensor("x", "FP32", F32, size=-8), Y, P), "non-negative integer"),
    "size not an integer": (_case(tensor("x", "FP32", F32, size="8"), Y, P),
                            "non-negative integer"),
    "unclaimed bytes": (_case(X, Y, P, trailer=b"??"), "belong to no input"),
    "huge shape": (_case(tensor("x", "FP32", F32, shape=[10**15]), Y, P),
                   "needs 4000000000000000 bytes"),
    "giant shape": (_case(tensor("x", "FP32", F32, shape=[10**10] * 3000), Y, P),
                    "more bytes than a request can hold"),
    "huge BYTES shape": (_case(X, Y, tensor("plan", "BYTES", PLAN, shape=[10**15])),
                         "need at least"),
    "BYTES length overflows": (_case(X, Y, tensor("plan", "BYTES", strings(b"gold")
                                                  + b"\xff\xff\xff\x7fbasic")), "declares"),
    "BYTES not UTF-8": (_case(X, Y, tensor("plan", "BYTES", strings(b"gold", b"\xff\xfe"))),
                        "not UTF-8"),
    "BYTES with extra bytes": (_case(X, Y, tensor("plan", "BYTES", PLAN + b"\0", shape=[2])),
                               "exact size"),
    "BOOL not 0 or 1": (_case(tensor("x", "BOOL", b"\x02\x00"), Y, P), "0 or 1"),
    "data and binary both": (_case(({**X[0], "data": [1.0, 2.0]}, X[1]), Y, P),
                             "not both"),
    "unknown output": (_case(X, Y, P, outputs=[{"name": "nope"}]), "does not exist"),
    "binary_data not a bool": (_case(X, Y, P, outputs=[
        {"name": "score", "parameters": {"binary_data": "yes"}}]), "true or false"),
    "binary_data_output not a bool": (_case(X, Y, P, parameters={"binary_data_output": 1}),
                                      "true or false"),
    "classification asked": (_case(X, Y, P, outputs=[
        {"name": "score", "parameters": {"classification": 2}}]), "not supported"),
}


@pytest.mark.parametrize(("request_", "words"), list(BAD.values()), ids=list(BAD))
def test_bad_binary_requests_are_400_naming_the_problem(
        request_: tuple[bytes, dict[str, str]], words: str) -> None:
    (r,) = post(request_)
    assert r.status_code == 400, r.text
    assert list(r.json()) == ["error"] and words in r.json()["error"], r.json()


def test_binary_size_without_the_header_is_400() -> None:
    body, _ = churn()
    (r,) = post((body, {}))
    assert r.status_code == 400
    head, _ = churn()
    (r,) = post((head[:head.index(b"}]}") + 3], {}))
    assert r.status_code == 400 and "no Inference-Header-Content-Length" in r.json()["error"]


def test_outputs_that_a_datatype_cannot_carry_stay_json() -> None:
    from reprise.serve._binary import encode_answer

    answer = {"outputs": [
        {"name": "big", "shape": [1], "datatype": "INT8", "data": [1000]},
        {"name": "none", "shape": [1], "datatype": "BYTES", "data": [None]},
        {"name": "ok", "shape": [2], "datatype": "INT32", "data": [1, -2]}]}
    body, headers, content_type = encode_answer(answer, (True, {}))
    size = int(dict(headers)[b"inference-header-content-length"])
    head = json.loads(body[:size])
    assert [o.get("data") for o in head["outputs"]] == [[1000], [None], None]
    assert np.frombuffer(body[size:], "<i4").tolist() == [1, -2]
    assert content_type == b"application/octet-stream"


def test_unknown_paths_and_methods_answer_with_the_error_body() -> None:
    async def main() -> list[Any]:
        async with serving(FakeSource(), ["churn@production"]) as (c, _):
            return [await c.get("/v2/repository/index"), await c.post("/v2/health/live"),
                    await c.get(INFER)]
    missing, wrong, wrong_hot = run(main())
    assert missing.status_code == 404 and list(missing.json()) == ["error"]
    assert "GET /v2/repository/index" in missing.json()["error"]
    assert wrong.status_code == 405 and "use GET" in wrong.json()["error"]
    assert wrong.headers["allow"] == "GET"
    assert wrong_hot.status_code == 405 and list(wrong_hot.json()) == ["error"]
