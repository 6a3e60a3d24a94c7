"""``POST /v1/models/NAME/feedback``: labels for logged predictions, by request id.

Body: ``{"feedback": [{"request_id": "...", "label": ...}, ...]}`` (at most 10,000
items; a label is a string, number or boolean). The labels go to the metadata store
(table ``feedback``), where ``reprise.monitor`` joins them to the request log by
request id, whether the request's chunk was written before or after the label came.
Answers ``{"model": NAME, "stored": N}``; 422 names every bad item; 404 for a model
this server does not serve. The body is read with the server's size and time limits,
and the store is written in a thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from reprise.serve._http import ClientGone, HTTPError, dumps, parse_json, read_body

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from reprise.serve._server import ServerState

__all__ = ["feedback_spec"]


def feedback_spec(state: ServerState) -> tuple[str, str, Callable[[Request], Awaitable[Response]],
                                               list[str], str, dict[str, Any]]:
    """The route (path, method, endpoint, tags, summary, OpenAPI extras) of the feedback
    endpoint, for ``create_app``."""

    def answer(payload: Any, status: int = 200) -> Response:
        from starlette.responses import Response

        return Response(dumps(payload), status_code=status, media_type="application/json")

    async def feedback(request: Request) -> Response:
        try:
            return answer(await _store(state, request.path_params["name"], request))
        except HTTPError as exc:
            return answer(exc.body(), exc.status)

    return ("/v1/models/{name}/feedback", "POST", feedback, ["v1"],
            "Labels for logged predictions, by request id", _OPENAPI)


_ITEM = {"type": "object", "required": ["request_id", "label"], "additionalProperties": False,
         "properties": {"request_id": {"type": "string", "minLength": 1, "maxLength": 128,
                                       "description": "The x-request-id of the answer."},
                        "label": {"type": ["string", "number", "boolean"]}}}
_OPENAPI: dict[str, Any] = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "required": ["feedback"], "properties": {"feedback": {
            "type": "array", "minItems": 1, "maxItems": 10_000, "items": _ITEM}}}}}},
    "responses": {"422": {"description": "Items that cannot be stored, each named in "
                                         "`fields`; nothing was stored."},
                  "404": {"description": "This server does not serve that model."}}}


async def _store(state: ServerState, name: str, request: Any) -> dict[str, Any]:
    from reprise.core._reqlog_types import FeedbackError, check_feedback

    if name not in state.table.default_ref:
        served = ", ".join(sorted(state.table.default_ref)) or "none"
        raise HTTPError(404, f"this server does not serve a model named {name[:100]!r} "
                        f"(it serves: {served})", kind="not_found")
    workspace = getattr(state.source, "workspace", None)
    if workspace is None:
        raise HTTPError(501, "this server has no workspace to store feedback in",
                        kind="unavailable")
    settings = state.settings
    try:
        async with asyncio.timeout(settings.body_timeout):
            body = await read_body(request.scope, request.receive, settings.max_body_bytes)
    except ClientGone:
        raise HTTPError(400, "the client went away before its body arrived",
                        kind="bad_request") from None
    except TimeoutError:
        raise HTTPError(408, f"the request body did not arrive within "
                        f"{settings.body_timeout:g} s", kind="timeout") from None
    try:
        items = check_feedback(parse_json(body))
    except FeedbackError as exc:
        raise HTTPError(422, "the feedback was not stored", kind="invalid",
                        fields=exc.problems) from None
    stored = await asyncio.to_thread(workspace.metadata.add_feedback, name, items, time.time())
    return {"model": name, "stored": stored}
