"""The Open Inference Protocol (KServe V2) REST mapping: metadata, tensors in and out.

Written by hand because the mapping is small and specific to Reprise signatures (a
tensor per input column, ``[rows]`` or ``[rows, *shape]``); KServe's and MLServer's
implementations come with their whole servers. Follows
``open-inference-protocol/specification/protocol/inference_rest.md``: tensor data flat
in row-major order or nested, errors as ``{"error": "..."}`` with 400 for a bad request.
"""

from __future__ import annotations

from typing import Any

from reprise.registry import Field, Validated
from reprise.serve._batcher import Result
from reprise.serve._datatypes import check_datatype
from reprise.serve._http import HTTPError
from reprise.serve._models import ServedModel

__all__ = ["DATATYPES", "EXTENSIONS", "check_infer", "elements", "infer_answer", "model_metadata"]

# advertised in the server metadata; binary_tensor_data is Triton's name (``_binary.py``)
EXTENSIONS = ("binary_tensor_data",)
DATATYPES = frozenset({"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
                       "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES"})
_INTS = frozenset({"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"})
_ACCEPTS = {"float": _INTS | {"FP16", "FP32", "FP64"}, "int": _INTS, "bool": {"BOOL"},
            "string": {"BYTES"}}
_DATATYPE = {"float": "FP64", "int": "INT64", "bool": "BOOL", "string": "BYTES"}
_FROM_NUMPY = {"f2": "FP16", "f4": "FP32", "f8": "FP64", "i1": "INT8", "i2": "INT16",
               "i4": "INT32", "i8": "INT64", "u1": "UINT8", "u2": "UINT16", "u4": "UINT32",
               "u8": "UINT64", "b1": "BOOL"}


_MAX_DIMS = 32  # more dimensions than any signature's tensor has
_MOST = 2**63  # more elements than any body holds: products stop growing past it


def elements(shape: list[int]) -> int:
    """The number of elements of ``shape``, or ``2**63 + 1`` for any larger number (a
    hostile shape of many large dimensions would otherwise make a giant integer)."""
    if 0 in shape:
        return 0
    count = 1
    for size in shape:
        count *= size
        if count > _MOST:
            return _MOST + 1
    return count


def _tensor(f: Field) -> dict[str, Any]:
    return {"name": f.name, "datatype": _DATATYPE[f.dtype], "shape": [-1, *f.shape]}


def model_metadata(model: ServedModel, versions: list[int]) -> dict[str, Any]:
    """``$metadata_model_response``: variable (batch) dimensions are -1."""
    sig = model.signature
    return {"name": model.name, "versions": [str(v) for v in versions],
            "platform": getattr(model.servable, "platform", None) or "reprise_package",
            "inputs": [_tensor(f) for f in sig.inputs],
            "outputs": [_tensor(f) for f in sig.outputs]}


def _bad(message: str) -> HTTPError:
    return HTTPError(400, message, kind="invalid")


def check_infer(model: ServedModel, payload: Any
                ) -> tuple[Validated, str | None, list[str] | None]:
    """Check an ``$inference_request``: (checked columns, the request's ``id`` or None,
    requested outputs)."""
    if not isinstance(payload, dict):
        raise _bad("the inference request must be a JSON object with \"inputs\"")
    request_id = payload.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise _bad("\"id\" must be a string")
    inputs = payload.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise _bad("\"inputs\" must be a non-empty list of tensors {name, shape, datatype, "
                   "data}")
    sig = model.signature
    fields = {f.name: f for f in sig.inputs}
    columns: dict[str, Any] = {}
    rows: set[int] = set()
    for tensor in inputs:
        column = _column(tensor, fields, sig.extra_columns)
        if column is None:  # an extra input the server's policy ignores
            continue
        name, values, n = column
        if name in columns:
            raise _bad(f"input {name!r} is given twice")
        columns[name] = values
        rows.add(n)
    if len(rows) > 1:
        raise _bad(f"the inputs disagree on the number of rows (first dimensions "
                   f"{sorted(rows)})")
    checked = sig.check_columns(columns)
    if not checked.ok:
        raise HTTPError(400, "the inputs do not match the model's signature", kind="invalid",
                        fields=[e.to_dict() for e in checked.errors])
    return checked, request_id, _requested(payload.get("outputs"))


def _column(tensor: Any, fields: dict[str, Field], extra: str,
            ) -> tuple[str, list[Any], int] | None:
    """One input tensor as a column: a list of one value (or one nested list) per row.

    The name is checked against the signature and the shape against the data before
    anything is built from the shape, a number the client declares."""
    if not isinstance(tensor, dict):
        raise _bad("each input must be an object {name, shape, datatype, data}")
    name, shape = tensor.get("name"), tensor.get("shape")
    datatype, data = tensor.get("datatype"), tensor.get("data")
    if not isinstance(name, str):
        raise _bad("each input needs a \"name\" string")
    f = fields.get(name)
    if f is None:
        if extra == "ignore":
            return None
        raise _bad(f"unexpected input {_label(name)}: not an input of this model (inputs: "
                   + ", ".join(list(fields)[:10]) + "); see GET /v2/models/NAME")
    shape = _check_shape(name, shape, f)
    if datatype not in DATATYPES:
        raise _bad(f"input {name!r}: \"datatype\" must be one of {sorted(DATATYPES)}")
    if not isinstance(data, list):
        raise _bad(f"input {name!r}: \"data\" must be a list (flat row-major, or nested)")
    if datatype not in _ACCEPTS[f.dtype]:
        raise _bad(f"input {name!r}: datatype {datatype} does not fit {f.expected()}; send "
                   f"{_DATATYPE[f.dtype]}")
    flat = _flatten(data) if data and isinstance(data[0], list) else data
    count = elements(shape)
    if len(flat) != count or (count == 0 and shape[0] != 0):
        raise _bad(f"input {name!r}: shape {shape} needs {_many(count)} elements; "
                   f"\"data\" has {len(flat)}")
    params = tensor.get("parameters")
    if not (isinstance(params, dict) and "binary_data_size" in params):
        check_datatype(name, datatype, flat)  # binary data was decoded as its datatype
    return name, (_nest(flat, shape) if f.shape else flat), shape[0]


def _check_shape(name: str, shape: Any, f: Field) -> list[int]:
    """A list of at most 32 non-negative integers: rows, then the field's own shape."""
    if (not isinstance(shape, list) or not 0 < len(shape) <= _MAX_DIMS
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise _bad(f"input {name!r}: \"shape\" must be a list of at most {_MAX_DIMS} "
                   "non-negative integers, the first one the number of rows")
    row_shape = tuple(shape[1:])
    if f.shape and row_shape != f.shape:
        raise _bad(f"input {name!r}: shape {shape}; expected [rows, "
                   + ", ".join(map(str, f.shape)) + "]")
    if not f.shape and row_shape not in ((), (1,)):
        raise _bad(f"input {name!r}: shape {shape}; expected [rows] or [rows, 1]")
    return shape


def _label(name: str) -> str:
    return repr(name if len(name) <= 64 else name[:61] + "...")


def _many(count: int) -> str:
    return str(count) if count <= _MOST else f"more than {_MOST}"


def _flatten(data: list[Any]) -> list[Any]:
    out: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def _nest(flat: list[Any], shape: list[int]) -> list[Any]:
    """Row-major ``flat`` as nested lists of ``shape`` (outermost: rows)."""
    out = flat
    for size in reversed(shape[1:]):
        out = [out[i:i + size] for i in range(0, len(out), size)]
    return out


def _requested(outputs: Any) -> list[str] | None:
    if outputs is None:
        return None
    if not isinstance(outputs, list) or not all(
            isinstance(o, dict) and isinstance(o.get("name"), str) for o in outputs):
        raise _bad("\"outputs\" must be a list of objects with a \"name\"")
    return [o["name"] for o in outputs]


def infer_answer(model: ServedModel, result: Result, rows: int, request_id: str,
                 requested: list[str] | None) -> dict[str, Any]:
    """``$inference_response``: every output (or those requested) as a flat tensor."""
    declared = {f.name: f for f in model.signature.outputs}
    names = list(result.outputs) if requested is None else requested
    outputs = []
    for name in names:
        values = result.outputs.get(name)
        if values is None:
            raise _bad(f"output {_label(name)} does not exist; outputs: "
                       f"{', '.join(result.outputs)}")
        row_shape = result.row_shapes.get(name)
        if row_shape is None:
            row_shape = _shape_of(values[0]) if values else ()
        outputs.append({"name": name, "shape": [rows, *row_shape],
                        "datatype": _datatype(result.kinds.get(name), declared.get(name),
                                              values),
                        "data": _flatten(values) if row_shape else values})
    return {"model_name": model.name, "model_version": str(model.version), "id": request_id,
            "outputs": outputs}


def _shape_of(value: Any) -> tuple[int, ...]:
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        value = value[0] if value else None
    return tuple(shape)


def _datatype(kind: str | None, declared: Field | None, values: list[Any]) -> str:
    if kind is not None and kind in _FROM_NUMPY:
        return _FROM_NUMPY[kind]
    if kind is not None and kind[0] in "OU":
        return "BYTES"
    if declared is not None:
        return _DATATYPE[declared.dtype]
    first = _flatten(values[:1])[:1] if values else []
    for python_type, datatype in ((bool, "BOOL"), (int, "INT64"), (float, "FP64")):
        if first and type(first[0]) is python_type:
            return datatype
    return "BYTES"
