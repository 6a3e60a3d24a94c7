"""The hot path: an ASGI middleware in front of FastAPI that checks every request
(``_gate.py``: host, site, bearer token) and answers the prediction endpoints itself.

Why not FastAPI routes: FastAPI's per-request machinery (``Request``, dependency
solving, response classes) costs ~100 µs, about a third of a whole single-row
prediction on a small machine. The other endpoints (health, metadata, metrics, docs)
are ordinary FastAPI routes behind this middleware; the prediction endpoints are added
to the OpenAPI document by hand (``_openapi.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

from reprise.core import new_id
from reprise.registry import Validated
from reprise.serve._batcher import Closed, Overloaded, PredictFailed, Result
from reprise.serve._binary import Wants, binary_outputs, encode_answer, read_infer
from reprise.serve._cache import ResponseCache, row_keys
from reprise.serve._finite import check_inputs, check_outputs
from reprise.serve._gate import OPEN_PATHS, Gate, check_body_type
from reprise.serve._http import (
    ClientGone,
    HTTPError,
    Receive,
    Scope,
    Send,
    dumps,
    header,
    parse_json,
    read_body,
    send_bytes,
)
from reprise.serve._metrics import UNKNOWN
from reprise.serve._models import ServedModel
from reprise.serve._oip import check_infer, infer_answer
from reprise.serve._reqlog import REQUEST_ID_HEADER
from reprise.serve._router import Split
from reprise.serve._server import ServerState
from reprise.serve._tracing import TRACEPARENT, continue_trace
from reprise.serve._v1 import check_v1, v1_answer

__all__ = ["OPEN_PATHS", "VERSION_HEADER", "HotPath"]

_logger = logging.getLogger(__name__)
_T = TypeVar("_T")
_Route = tuple[bool, str, str | None]  # (Open Inference Protocol?, name, version)
# Bodies up to this size are parsed, checked and answered on the event loop (well under
# a millisecond each; a thread hand-off would cost a sizeable share of a single-row
# request); larger ones in the server's request threads, so that the loop keeps
# answering health probes and small requests meanwhile. Kept small: the loop runs its
# ready work in turn, so a probe can wait behind every inline check of the moment.
_INLINE_BYTES = 8 * 1024
VERSION_HEADER = b"x-reprise-model-version"  # on every answer a model version gave


def match(path: str, raw_path: bytes | None = None) -> _Route | None:
    """``/v1/models/N[/versions/V]/predict`` or ``/v2/models/N[/versions/V]/infer``.

    Split on the path as sent (``raw_path``) and only then percent-decoded segment by
    segment, so that ``%2F`` inside a name stays in the name (which the name rule then
    refuses) instead of becoming a separator that moves the other segments."""
    parts = path.split("/") if raw_path is None else _segments(raw_path)
    if len(parts) not in (5, 7) or parts[0] or parts[2] != "models" or not parts[3]:
        return None
    if len(parts) == 7 and (parts[4] != "versions" or not parts[5]):
        return None
    version = parts[5] if len(parts) == 7 else None
    if parts[1] == "v1" and parts[-1] == "predict":
        return False, parts[3], version
    if parts[1] == "v2" and parts[-1] == "infer":
        return True, parts[3], version
    return None


@dataclass(slots=True)
class _Job:
    """A checked request, between its check and its answer."""

    model: ServedModel
    checked: Validated
    columnar: bool = False  # /v1: the body was {"columns": ...}
    request_id: str = ""  # OIP: the request's id and requested outputs, binary wishes
    requested: list[str] | None = None
    wants: Wants | None = None
    keys: list[bytes] | None = None  # the response cache's key of each row (when on)


def _segments(raw_path: bytes) -> list[str]:
    raw = raw_path.partition(b"?")[0]  # some servers (and httpx's ASGI transport) keep it
    try:
        text = raw.decode("ascii")
        if "%" not in text:  # the usual case: nothing to decode
            return text.split("/")
        return [unquote(p, errors="strict") for p in text.split("/")]
    except UnicodeDecodeError:  # not percent-encoded UTF-8: left encoded, the rule refuses it
        return [p if p.isascii() else "\ufffd" for p in raw.decode("latin-1").split("/")]


class HotPath:
    """ASGI middleware: request checks for all, prediction endpoints answered here."""

    def __init__(self, app: Any, state: ServerState) -> None:
        self.app, self.state = app, state
        self.tracing = state.tracing
        self._gate = Gate(state.settings, state.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        try:
            self._gate.check(scope)
        except HTTPError as error:
            await send_bytes(send, error.status, dumps(error.body(oip=path.startswith("/v2"))),
                             error.headers)
            return
        route = match(path, scope.get("raw_path"))
        if route is None:
            await self.app(scope, receive, send)
        elif scope["method"] != "POST":
            await send_bytes(send, 405, dumps({"error": "use POST"}), [(b"allow", b"POST")])
        else:
            await self._serve(route, scope, receive, send)

    async def _serve(self, route: _Route, scope: Scope, receive: Receive, send: Send) -> None:
        oip, name, version = route
        start = time.perf_counter()
        model: ServedModel | None = None
        split: Split | None = None
        result: Result | None = None
        job: _Job | None = None
        kind: str | None = None
        checking = queued = 0.0  # when the check began, when the request was queued
        headers: list[tuple[bytes, bytes]] = []
        content_type = b"application/json"
        log = self.state.request_log
        request_id: str | None = None
        sent: str | None = None
        header_checked = False
        try:
            check_body_type(scope)
            if log is not None:  # the client's x-request-id, checked before the body is read
                sent = log.header_id(scope)
                header_checked = True
            body = await self._read(scope, receive)
            model = self.state.table.lookup(name, version)
            if version is None:  # a pinned version never takes part in a rollout
                split = self.state.table.split_of(name)
            offload = len(body) > _INLINE_BYTES
            checking = time.perf_counter()
            job = await self._cpu(offload, self._check, oip, model, scope, body, split)
            model = job.model
            if log is not None:  # the header's id, else the OIP body's, else a new one
                request_id = log.choose_id(sent, job.request_id or None)
            if oip:  # an OIP answer repeats the request's id, else names the logged one
                job.request_id = job.request_id or request_id or str(uuid.uuid4())
            queued = time.perf_counter()
            model.last_used = time.monotonic()  # the warm-up keeps idle versions warm
            result = await _cached(model, job, self.state.cache)
            data, headers, content_type = await self._cpu(offload, _answer, job, result)
            status = 200
        except HTTPError as exc:
            status, data, headers, kind = exc.status, dumps(exc.body(oip=oip)), exc.headers, \
                exc.kind
        except ClientGone:
            return
        except Exception as exc:  # a bug of ours: answer, log, keep serving
            error = _internal(exc)
            status, data, kind = 500, dumps(error.body(oip=oip)), error.kind
        if request_id is None and header_checked:  # a refused request still gets its id
            assert log is not None
            request_id = log.choose_id(sent)
        incoming = header(scope, TRACEPARENT)
        span: Any = None
        offset = 0
        if self.tracing is not None:
            span, offset = self.tracing.start(_span_name(oip, version), start, incoming,
                                              _span_attributes(scope, model),
                                              header(scope, b"tracestate"))
            headers = [*headers, (TRACEPARENT, self.tracing.traceparent(span, incoming))]
        elif incoming is not None:
            headers = [*headers, (TRACEPARENT, continue_trace(incoming))]

        if model is not None:  # every answer names the version that computed it
            headers = [*headers, (VERSION_HEADER, str(model.version).encode())]
        if request_id is not None:
            headers = [*headers, (REQUEST_ID_HEADER, request_id.encode())]
        await send_bytes(send, status, data, headers, content_type)
        seconds = time.perf_counter() - start
        if model is not None:
            labels = (model.name, str(model.version))
        else:
            labels = (name if name in self.state.table.default_ref else UNKNOWN, "")
        self.state.metrics.request(*labels, status, seconds, kind)
        if request_id is not None and result is not None and job is not None and status == 200:
            assert log is not None
            log.offer(job.model.name, job.model.version, request_id, seconds,
                      job.checked.columns, job.checked.rows, result.outputs)
        if split is not None and model is not None:
            keys = split.record(model, status, seconds, result)
            if split.shadow is not None and result is not None and job is not None \
                    and model is split.stable:
                split.shadow.offer(job.checked.columns, job.checked.rows, result,
                                   keys if status == 200 else None)

        if model is not None and (result is not None or not 400 <= status < 500):
            # the SLO windows count what the rollout analysis counts (Split.record, which
            # counts a rollout's per-version series too): any answer but a client's 4xx,
            # an error when a 5xx or refused after the model ran (a non-finite output)
            self.state.slo.record(model.name, start + seconds,
                                  error=status != 200 or result is None, seconds=seconds)
        if span is not None:
            self._spans(span, offset, checking, queued, result, start + seconds, status, kind)

    def _spans(self, span: Any, offset: int, checking: float, queued: float,
               result: Result | None, end: float, status: int, kind: str | None) -> None:
        """The request's child spans, from the times measured on its way."""
        tracing = self.tracing
        assert tracing is not None
        if checking:
            tracing.child(span, "validate", checking, queued or end, offset)
        if result is not None and result.call[0]:
            tracing.child(span, "queue", queued, result.call[0], offset)
            tracing.child(span, "predict", result.call[0], result.call[1], offset)
        tracing.finish(span, end, offset, status, kind)

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        settings = self.state.settings
        if getattr(getattr(receive, "__self__", None), "more_body", True) is False:
            # uvicorn's request cycle already holds the whole body (the usual case for a
            # small request): reading cannot wait, so no timer (asyncio.timeout costs a
            # few microseconds, a sizeable share of a single-row prediction)
            return await read_body(scope, receive, settings.max_body_bytes)
        try:
            async with asyncio.timeout(settings.body_timeout):
                return await read_body(scope, receive, settings.max_body_bytes)
        except TimeoutError:
            raise HTTPError(408, f"the request body did not arrive within "
                            f"{settings.body_timeout:g} s", kind="timeout",
                            headers=[(b"connection", b"close")]) from None

    async def _cpu(self, offload: bool, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)``: in the server's request thread pool when ``offload``."""
        if not offload:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self.state.cpu, fn, *args)

    def _check(self, oip: bool, model: ServedModel, scope: Scope, body: bytes,
               split: Split | None = None) -> _Job:
        """Parse the body, choose the version (``split``: a rollout runs) and check the
        body against its signature (no await: it may run in a thread)."""
        if oip:
            payload = read_infer(scope, body, self.state.settings.max_body_bytes)
            if split is not None:
                model = split.route(scope["headers"], payload, True)
            checked, body_id, requested = check_infer(model, payload)
            job = _Job(model, checked, request_id=body_id or "", requested=requested,
                       wants=binary_outputs(payload))
        else:
            payload = parse_json(body)
            if split is not None:
                model = split.route(scope["headers"], payload, False)
            checked, columnar = check_v1(model, payload)
            job = _Job(model, checked, columnar=columnar)
        if checked.out_of_range:
            self.state.metrics.out_of_range(model.name, str(model.version),
                                            checked.out_of_range)
        if not oip and not checked.ok:
            raise HTTPError(422, "the request does not match the model's signature",
                            kind="invalid", fields=[e.to_dict() for e in checked.errors])
        check_inputs(model, checked.columns)
        cache = self.state.cache  # here: a large request hashes off the loop
        if cache is not None and cache.looks(model.name, model.version, hash(body),
                                             checked.rows):
            job.keys = row_keys(checked.columns, checked.rows, model.input_dtypes)
        return job


def _span_name(oip: bool, version: str | None) -> str:
    """The request span's name: the route template (HTTP semantic conventions)."""
    versions = "/versions/{version}" if version is not None else ""
    return f"POST /v2/models/{{name}}{versions}/infer" if oip else \
        f"POST /v1/models/{{name}}{versions}/predict"


def _span_attributes(scope: Scope, model: ServedModel | None) -> dict[str, Any]:
    out: dict[str, Any] = {"http.request.method": "POST", "url.path": scope["path"][:200]}
    if model is not None:
        out["reprise.model.name"] = model.name
        out["reprise.model.version"] = model.version
    return out


def _answer(job: _Job, result: Result) -> tuple[bytes, list[tuple[bytes, bytes]], bytes]:
    """(body, extra headers, content type) of a prediction's answer."""
    check_outputs(job.model, result)
    if job.wants is None:
        return dumps(v1_answer(job.model, job.checked, result, job.columnar)), [], \
            b"application/json"
    answer = infer_answer(job.model, result, job.checked.rows, job.request_id, job.requested)
    return encode_answer(answer, job.wants)


async def _cached(model: ServedModel, job: _Job, cache: ResponseCache | None) -> Result:
    """The request's answer: the rows the response cache holds for this version from
    it, the others from the model (then stored)."""
    columns, rows, keys = job.checked.columns, job.checked.rows, job.keys
    if cache is None or keys is None:
        return await _run(model, columns, rows)
    name, version = model.name, model.version
    found, meta = cache.get(name, version, keys)
    missing = [i for i, row in enumerate(found) if row is None]
    if not missing and meta is not None:
        names, kinds, shapes = meta
        return Result({n: [row[j] for row in found if row is not None]
                       for j, n in enumerate(names)}, kinds, shapes)
    if len(missing) == rows:
        result = await _run(model, columns, rows)
        cache.put(name, version, keys, result.outputs, result.kinds, result.row_shapes)
        return result
    fresh = await _run(model, _take(columns, missing), len(missing))
    cache.put(name, version, [keys[i] for i in missing], fresh.outputs, fresh.kinds,
              fresh.row_shapes)
    names = tuple(fresh.outputs)
    if meta is None or meta[0] != names:  # the version answered in another shape since
        return await _run(model, columns, rows)
    outputs: dict[str, list[Any]] = {n: [] for n in names}
    it = iter(range(len(missing)))
    for row in found:
        if row is None:
            i = next(it)
            for n in names:
                outputs[n].append(fresh.outputs[n][i])
        else:
            for j, n in enumerate(names):
                outputs[n].append(row[j])
    return Result(outputs, fresh.kinds, fresh.row_shapes, fresh.call)


def _take(columns: dict[str, Any], index: list[int]) -> dict[str, Any]:
    """The rows ``index`` of checked columns (lists, or numpy arrays from the OIP)."""
    out: dict[str, Any] = {}
    for n, col in columns.items():
        if type(col) is list:
            out[n] = [col[i] for i in index]
        else:
            import numpy as np

            out[n] = np.asarray(col)[np.asarray(index, dtype=np.intp)]
    return out


async def _run(model: ServedModel, columns: dict[str, Any], rows: int) -> Result:
    """Queue checked columns on the model's batcher and wait for this request's rows."""
    what = f"model {model.name!r} v{model.version}"
    try:
        return await model.batcher.submit(columns, rows)
    except Overloaded as exc:
        raise HTTPError(503, f"{what} is overloaded: the estimated wait "
                        f"({exc.estimate_s * 1000:.0f} ms) exceeds the latency budget; retry "
                        f"after {exc.retry_after} s", kind="overloaded",
                        headers=[(b"retry-after", str(exc.retry_after).encode())]) from None
    except PredictFailed as exc:
        raise HTTPError(500, f"{what} failed on this request; error id {exc.error_id} (the "
                        "server log has the details)", kind="model_error",
                        error_id=exc.error_id) from None
    except Closed:
        raise HTTPError(503, f"{what} is being replaced or the server is stopping; retry",
                        kind="unavailable", headers=[(b"retry-after", b"1")]) from None


def _internal(exc: Exception) -> HTTPError:
    error_id = new_id()
    _logger.error("internal error while answering a prediction (error id %s)", error_id,
                  exc_info=exc)
    return HTTPError(500, f"internal server error; error id {error_id} (the server log has "
                     "the details)", kind="internal", error_id=error_id)
