"""OpenAPI entries for the prediction endpoints, which the hot path answers outside
FastAPI's router (see ``_hot.py``) and so are described here by hand."""

from __future__ import annotations

from typing import Any

__all__ = ["hot_paths"]

_ERROR = {"type": "object", "properties": {"error": {"type": "string"}},
          "required": ["error"]}
_V1_REQUEST = {"oneOf": [
    {"type": "object", "properties": {"records": {"type": "array", "items": {
        "type": "object"}}}, "required": ["records"]},
    {"type": "object", "properties": {"columns": {"type": "object", "additionalProperties": {
        "type": "array"}}}, "required": ["columns"]},
    {"type": "array", "items": {"type": "object"}}]}
_V1_RESPONSE = {"type": "object", "properties": {
    "model": {"type": "string"}, "version": {"type": "integer"},
    "predictions": {"oneOf": [{"type": "array"}, {"type": "object"}]},
    "out_of_range": {"type": "object", "additionalProperties": {"type": "integer"}}}}
_V1_ERROR = {"type": "object", "properties": {
    "error": {"type": "string"}, "error_id": {"type": "string"},
    "fields": {"type": "array", "items": {"type": "object", "properties": {
        "field": {"type": "string"}, "problem": {"type": "string"},
        "expected": {"type": "string"}, "got": {"type": "string"},
        "row": {"type": "integer"}}}}}}
_TENSOR = {"type": "object", "properties": {
    "name": {"type": "string"}, "shape": {"type": "array", "items": {"type": "integer"}},
    "datatype": {"type": "string"}, "parameters": {"type": "object"},
    "data": {"type": "array"}}, "required": ["name", "shape", "datatype"]}
_OIP_REQUEST = {"type": "object", "properties": {
    "id": {"type": "string"}, "parameters": {"type": "object"},
    "inputs": {"type": "array", "items": _TENSOR},
    "outputs": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}}}}}, "required": ["inputs"]}
_OIP_RESPONSE = {"type": "object", "properties": {
    "model_name": {"type": "string"}, "model_version": {"type": "string"},
    "id": {"type": "string"}, "outputs": {"type": "array", "items": _TENSOR}},
    "required": ["model_name", "outputs"]}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _operation(summary: str, request: dict[str, Any], ok: dict[str, Any],
               error: dict[str, Any], invalid: str, versioned: bool) -> dict[str, Any]:
    params = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]
    if versioned:
        params.append({"name": "version", "in": "path", "required": True,
                       "schema": {"type": "string"}})
    return {"post": {
        "summary": summary, "parameters": params,
        "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
        "responses": {
            "200": _json(ok, "Predictions, with the version that computed them"),
            "400": _json(error, "Malformed JSON" + ("" if invalid == "422" else
                                                    ", or inputs that do not fit the model")),
            **({"422": _json(error, "Inputs that do not fit the model's signature")}
               if invalid == "422" else {}),
            "401": _json(error, "Missing or wrong bearer token"),
            "404": _json(error, "Model or version not served"),
            "413": _json(error, "Body over the size limit"),
            "500": _json(error, "The model failed; the error id is in the server log"),
            "503": _json(error, "Overloaded or loading; see Retry-After")}}}


def _binary_form(operation: dict[str, Any]) -> dict[str, Any]:
    """The binary tensor extension: JSON header, then raw tensors (``_binary.py``)."""
    raw = {"schema": {"type": "string", "format": "binary"}}
    post = operation["post"]
    post["description"] = ("Binary tensor extension: with the header "
                           "Inference-Header-Content-Length: N, the first N bytes are the "
                           "JSON request and the rest the inputs' raw little-endian data "
                           "(parameters.binary_data_size each); outputs asked for with "
                           "parameters.binary_data(_output) come back the same way. Bodies "
                           "may be gzip or deflate (Content-Encoding).")
    post["requestBody"]["content"]["application/octet-stream"] = raw
    post["responses"]["200"]["content"]["application/octet-stream"] = raw
    post["responses"]["415"] = _json(_ERROR, "Content-Encoding other than gzip or deflate")
    return operation


def hot_paths() -> dict[str, Any]:
    """Path items for the prediction endpoints."""
    v1 = "Predict with Reprise's JSON (records or columns)"
    v2 = "Open Inference Protocol (KServe V2) inference"
    return {
        "/v1/models/{name}/predict": _operation(
            v1 + " — the version the server follows", _V1_REQUEST, _V1_RESPONSE, _V1_ERROR,
            "422", False),
        "/v1/models/{name}/versions/{version}/predict": _operation(
            v1 + " — one served version", _V1_REQUEST, _V1_RESPONSE, _V1_ERROR, "422", True),
        "/v2/models/{name}/infer": _binary_form(_operation(
            v2, _OIP_REQUEST, _OIP_RESPONSE, _ERROR, "400", False)),
        "/v2/models/{name}/versions/{version}/infer": _binary_form(_operation(
            v2, _OIP_REQUEST, _OIP_RESPONSE, _ERROR, "400", True))}
