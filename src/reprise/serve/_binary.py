"""The Open Inference Protocol's binary tensor data extension (Triton's
``binary_tensor_data``), which ``tritonclient.http`` uses by default.

A request with the header ``Inference-Header-Content-Length: N`` is N bytes of JSON
followed by the raw tensors, in input order; an input carried that way has
``"parameters": {"binary_data_size": K}`` and no ``"data"``. Fixed-size types are
little-endian, row-major; BYTES elements are each a 4-byte little-endian length and the
bytes. Outputs are sent the same way when the request asks (``parameters.binary_data``
per output, or ``parameters.binary_data_output`` for all).

Every size a client declares is checked against the bytes actually received (already
bounded by the server's body limit) before anything is decoded, so a hostile header
never makes the server allocate. Compressed bodies (``Content-Encoding: gzip`` or
``deflate``, which ``tritonclient`` can send) are inflated up to the same limit.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

from reprise.serve._http import HTTPError, Scope, dumps, parse_json
from reprise.serve._oip import DATATYPES, elements

__all__ = ["Wants", "binary_outputs", "encode_answer", "read_infer"]

_NUMPY = {"BOOL": "?", "UINT8": "u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8",
          "INT8": "i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8", "FP16": "<f2",
          "FP32": "<f4", "FP64": "<f8"}
# numpy kinds whose values an output datatype carries exactly (else it goes as JSON)
_KINDS = {"BOOL": "b", "FP16": "biuf", "FP32": "biuf", "FP64": "biuf"}
_LENGTH = struct.Struct("<I")
Wants = tuple[bool, dict[str, bool]]  # (binary by default?, per-output choice)


def _bad(message: str) -> HTTPError:
    return HTTPError(400, message, kind="invalid")


def read_infer(scope: Scope, body: bytes, limit: int) -> Any:
    """The JSON inference request, binary tensors decoded into flat ``"data"`` lists."""
    encoding = length = None
    for key, value in scope["headers"]:  # one pass: this runs on every JSON request too
        if key == b"content-encoding":
            encoding = value
        elif key == b"inference-header-content-length":
            length = value
    if encoding is not None:
        body = _inflate(encoding, body, limit)
    size = None if length is None else _header_length(length, len(body))
    if size is None:
        payload = parse_json(body)
        _attach(payload, b"", binary=False)
        return payload
    payload = parse_json(body[:size])
    _attach(payload, memoryview(body)[size:], binary=True)
    return payload


def _inflate(encoding: bytes, body: bytes, limit: int) -> bytes:
    encoding = encoding.strip().lower()
    if encoding == b"identity":
        return body
    if encoding not in (b"gzip", b"deflate"):
        raise HTTPError(415, "unsupported Content-Encoding; send the body uncompressed or "
                        "compressed with gzip or deflate", kind="bad_request")
    # gzip: a gzip wrapper (wbits 16+); deflate: the zlib format (RFC 9110, what
    # tritonclient's zlib.compress sends)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == b"gzip"
                                  else zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error:
        raise HTTPError(400, f"the body is not valid {encoding.decode()} data",
                        kind="bad_request") from None
    if len(out) > limit:
        raise HTTPError(413, f"the decompressed request body is larger than the server's "
                        f"limit of {limit} bytes; send fewer rows per request",
                        kind="too_large")
    if not inflater.eof or inflater.unused_data:
        raise HTTPError(400, f"the {encoding.decode()} body is truncated or has bytes "
                        "after its end", kind="bad_request")
    return out


def _header_length(raw: bytes, body_size: int) -> int:
    text = raw.strip()
    if not text.isdigit() or len(text) > 19:
        raise _bad("Inference-Header-Content-Length must be a non-negative whole number: "
                   "the length in bytes of the JSON part of the body")
    size = int(text)
    if size > body_size:
        raise _bad(f"Inference-Header-Content-Length is {size} but the body has only "
                   f"{body_size} bytes; it must be the length of the JSON part")
    return size


def _attach(payload: Any, tail: memoryview | bytes, *, binary: bool) -> None:
    """Decode each input that has ``binary_data_size`` from ``tail``, in order."""
    inputs = payload.get("inputs") if isinstance(payload, dict) else None
    if not isinstance(inputs, list):
        if tail:
            raise _bad("binary tensor data was sent but the request has no \"inputs\"")
        return  # check_infer reports what is wrong with the request
    offset = 0
    for tensor in inputs:
        size = _declared_size(tensor)
        if size is None:
            continue
        name = tensor.get("name")
        if not binary:
            raise _bad(f"input {name!r} has \"binary_data_size\" but the request has no "
                       "Inference-Header-Content-Length header saying where the JSON ends")
        if size > len(tail) - offset:
            raise _bad(f"input {name!r}: \"binary_data_size\" is {size} but only "
                       f"{len(tail) - offset} bytes of binary data are left in the body")
        tensor["data"] = _decode(tensor, tail[offset:offset + size])
        offset += size
    if offset != len(tail):
        raise _bad(f"{len(tail) - offset} bytes after the JSON header belong to no input; "
                   "the inputs' \"binary_data_size\" must add up to the binary part")


def _declared_size(tensor: Any) -> int | None:
    params = tensor.get("parameters") if isinstance(tensor, dict) else None
    if params is None:
        return None
    name = tensor.get("name")
    if not isinstance(params, dict):
        raise _bad(f"input {name!r}: \"parameters\" must be an object")
    if "shared_memory_region" in params:
        raise _bad(f"input {name!r}: shared memory is not supported by this server; send "
                   "the tensor in the body")
    size = params.get("binary_data_size")
    if size is None:
        return None
    if type(size) is not int or size < 0:
        raise _bad(f"input {name!r}: \"binary_data_size\" must be a non-negative integer")
    if "data" in tensor:
        raise _bad(f"input {name!r}: give either \"data\" or \"binary_data_size\", not "
                   "both")
    return size


def _decode(tensor: dict[str, Any], raw: memoryview | bytes) -> list[Any]:
    """The flat row-major values of one binary tensor, after checking its size."""
    name, shape, datatype = tensor.get("name"), tensor.get("shape"), tensor.get("datatype")
    if (not isinstance(shape, list)
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise _bad(f"input {name!r}: \"shape\" must be a list of non-negative integers, the "
                   "first one the number of rows")
    if datatype not in DATATYPES:
        raise _bad(f"input {name!r}: \"datatype\" must be one of {sorted(DATATYPES)}")
    count = elements(shape)
    if datatype == "BYTES":
        return _strings(name, raw, count)
    dtype = np.dtype(_NUMPY[datatype])
    need = count * dtype.itemsize
    if need != len(raw):
        what = f"{need} bytes" if count <= 2**63 else "more bytes than a request can hold"
        raise _bad(f"input {name!r}: shape {shape} of {datatype} needs {what}; "
                   f"\"binary_data_size\" is {len(raw)}")
    if datatype == "BOOL" and bytes(raw).translate(None, b"\x00\x01"):
        raise _bad(f"input {name!r}: BOOL elements must be bytes 0 or 1")
    values: list[Any] = np.frombuffer(raw, dtype=dtype).tolist()
    return values


def _strings(name: Any, raw: memoryview | bytes, count: int) -> list[Any]:
    """BYTES elements: each a 4-byte little-endian length, then that many bytes."""
    if count * _LENGTH.size > len(raw):
        raise _bad(f"input {name!r}: {count} BYTES elements need at least "
                   f"{count * _LENGTH.size} bytes; \"binary_data_size\" is {len(raw)}")
    out: list[Any] = []
    offset = 0
    for i in range(count):
        if offset + _LENGTH.size > len(raw):
            raise _bad(f"input {name!r}: the binary data ends inside element {i}")
        (size,) = _LENGTH.unpack_from(raw, offset)
        offset += _LENGTH.size
        if size > len(raw) - offset:
            raise _bad(f"input {name!r}: element {i} declares {size} bytes but only "
                       f"{len(raw) - offset} are left")
        try:
            out.append(str(raw[offset:offset + size], "utf-8"))
        except UnicodeDecodeError:
            raise _bad(f"input {name!r}: element {i} is not UTF-8 text") from None
        offset += size
    if offset != len(raw):
        raise _bad(f"input {name!r}: {len(raw) - offset} bytes after its {count} BYTES "
                   "elements; \"binary_data_size\" must be the exact size")
    return out


def binary_outputs(payload: dict[str, Any]) -> Wants:
    """Which outputs the request wants as binary data (checked before predicting)."""
    params = payload.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise _bad("\"parameters\" must be an object")
    default = (params or {}).get("binary_data_output", False)
    if type(default) is not bool:
        raise _bad("\"parameters\": \"binary_data_output\" must be true or false")
    per: dict[str, bool] = {}
    for output in payload.get("outputs") or []:
        params = output.get("parameters") if isinstance(output, dict) else None
        if params is None:
            continue
        name = output.get("name")
        if not isinstance(params, dict):
            raise _bad(f"output {name!r}: \"parameters\" must be an object")
        if params.get("classification") or "shared_memory_region" in params:
            raise _bad(f"output {name!r}: classification and shared memory are not "
                       "supported by this server")
        choice = params.get("binary_data")
        if choice is not None and type(choice) is not bool:
            raise _bad(f"output {name!r}: \"binary_data\" must be true or false")
        if choice is not None:
            per[name] = choice
    return default, per


def encode_answer(answer: dict[str, Any], wants: Wants,
                  ) -> tuple[bytes, list[tuple[bytes, bytes]], bytes]:
    """(body, extra headers, content type): the outputs wanted as binary data after the
    JSON header, or plain JSON when there are none."""
    default, per = wants
    chunks: list[bytes] = []
    for output in answer["outputs"]:
        if not per.get(output["name"], default):
            continue
        raw = _encode(output["datatype"], output["data"])
        if raw is None:  # values that the datatype cannot carry exactly: stay JSON
            continue
        del output["data"]
        output["parameters"] = {"binary_data_size": len(raw)}
        chunks.append(raw)
    head = dumps(answer)
    if not chunks:
        return head, [], b"application/json"
    return (head + b"".join(chunks), [(b"inference-header-content-length",
                                       b"%d" % len(head))], b"application/octet-stream")


def _encode(datatype: str, data: list[Any]) -> bytes | None:
    if datatype == "BYTES":
        parts = []
        for value in data:
            if isinstance(value, str):
                value = value.encode()
            elif not isinstance(value, bytes):
                return None
            parts.append(_LENGTH.pack(len(value)))
            parts.append(value)
        return b"".join(parts)
    target = np.dtype(_NUMPY[datatype])
    if not data:
        return b""
    try:
        array = np.asarray(data)
    except (TypeError, ValueError, OverflowError):
        return None
    if array.dtype.kind not in _KINDS.get(datatype, "biu"):
        return None
    if target.kind in "iu" and array.dtype.kind in "iu" and not (
            np.iinfo(target).min <= array.min() and array.max() <= np.iinfo(target).max):
        return None
    return array.astype(target, copy=False).tobytes()
