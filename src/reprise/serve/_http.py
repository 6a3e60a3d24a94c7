"""Plain ASGI helpers for the hot path: bounded body reading, JSON in and out, errors.

Written against ASGI directly rather than through Starlette's ``Request``/``Response``
because those cost tens of microseconds per request, a sizeable share of a single-row
prediction; everything here is a few dictionary operations.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["ClientGone", "HTTPError", "Receive", "Scope", "Send", "dumps", "header",
           "loads", "parse_json", "read_body", "send_bytes"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

try:  # orjson (the serve extra) parses and writes JSON several times faster
    import orjson

    def loads(data: bytes) -> Any:
        return orjson.loads(data)

    def dumps(value: Any) -> bytes:
        return orjson.dumps(value)

except ImportError:  # pragma: no cover - the standard library is the fallback

    def loads(data: bytes) -> Any:
        return json.loads(data)

    def dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()


class HTTPError(Exception):
    """An answer other than 200, raised anywhere on the request path.

    ``fields`` (signature problems) and ``error_id`` (a model or server failure, also in
    the server log) are added to the body; the message never contains request values.
    """

    def __init__(self, status: int, message: str, *, kind: str,
                 headers: list[tuple[bytes, bytes]] | None = None,
                 fields: list[dict[str, Any]] | None = None, error_id: str | None = None,
                 ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind
        self.headers = headers or []
        self.fields, self.error_id = fields, error_id

    def body(self, *, oip: bool = False) -> dict[str, Any]:
        """The JSON body: ``{"error": ...}`` (Open Inference Protocol: nothing else)."""
        if oip:
            return {"error": self.message + _fields_text(self.fields or [])}
        out: dict[str, Any] = {"error": self.message}
        if self.fields is not None:
            out["fields"] = self.fields
        if self.error_id is not None:
            out["error_id"] = self.error_id
        return out


def parse_json(body: bytes) -> Any:
    """The request body as JSON, or a 400 that says where it stops being JSON."""
    try:
        return loads(body)
    except ValueError as exc:
        where = (f" (line {exc.lineno}, column {exc.colno})"
                 if hasattr(exc, "lineno") and hasattr(exc, "colno") else "")
        raise HTTPError(400, f"the request body is not valid JSON{where}",
                        kind="bad_request") from None


class ClientGone(Exception):
    """The client disconnected before its request body arrived: nobody to answer."""


def _fields_text(fields: list[dict[str, Any]]) -> str:
    parts = []
    for f in fields[:20]:
        row = f" (row {f['row']})" if "row" in f else ""
        parts.append(f"{f['field']}: {f['problem']}, expected {f['expected']}, "
                     f"got {f['got']}{row}")
    more = f"; and {len(fields) - 20} more" if len(fields) > 20 else ""
    return (": " + "; ".join(parts) + more) if parts else ""


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower case), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body, refusing (413) one over ``limit`` bytes by its Content-Length
    before reading and by the bytes received while reading (chunked uploads)."""
    length = header(scope, b"content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            raise HTTPError(400, "Content-Length is not a number", kind="bad_request") from None
        if declared > limit:
            raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> HTTPError:
    return HTTPError(413, f"the request body is larger than the server's limit of {limit} "
                     "bytes; send fewer rows per request", kind="too_large")


async def send_bytes(send: Send, status: int, body: bytes,
                     headers: list[tuple[bytes, bytes]] | None = None,
                     content_type: bytes = b"application/json") -> None:
    """Send a whole response in two ASGI messages."""
    head = [(b"content-type", content_type), (b"content-length", b"%d" % len(body))]
    if headers:
        head.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
