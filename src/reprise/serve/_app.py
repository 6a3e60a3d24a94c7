"""``create_app``: the ASGI application of a model server.

The application is Starlette's (routing, lifespan, middleware), not FastAPI's: FastAPI and
the pydantic models it builds at import cost about 0.2 s of CPU at every start of a
server (a cold start of an ONNX package is about one second), for what only the API
documentation needs. The routes are described once (:class:`_Spec`); ``/openapi.json``
and ``/docs`` build their document from those descriptions with FastAPI on the first
request for them (in a thread), then keep it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reprise.core import require
from reprise.registry import ModelSource
from reprise.serve._http import HTTPError, dumps
from reprise.serve._oip import EXTENSIONS, model_metadata
from reprise.serve._server import ServerState
from reprise.serve._settings import Settings

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["create_app"]

_TITLE = "Reprise model server"
_OPENAPI_URL, _DOCS_URL, _OAUTH2_URL = "/openapi.json", "/docs", "/docs/oauth2-redirect"


@dataclass(frozen=True)
class _Spec:
    """One route: what Starlette serves and what the OpenAPI document says of it."""

    path: str
    method: str
    endpoint: Callable[[Request], Awaitable[Response]]
    tags: list[str]
    summary: str
    openapi_extra: dict[str, Any] | None = field(default=None)


def create_app(source: ModelSource, refs: list[str], *, settings: Settings | None = None,
               tracer_provider: Any = None) -> Starlette:
    """An ASGI app (Starlette's) serving ``refs`` (``NAME@ALIAS``, ``NAME:VERSION`` or
    ``NAME``), its API documented at ``/docs`` and ``/openapi.json``.

    At start-up (the ASGI lifespan) it resolves and loads every ref, warms each model up
    with its example input, and only then reports ready (``/readyz``,
    ``/v2/health/ready``); references that can move are polled every
    ``settings.poll_interval`` seconds and swapped without dropping a request.

    Prediction requests are traced with OpenTelemetry through ``tracer_provider``, or,
    with ``settings.otel``, through one configured by the ``OTEL_*`` environment
    variables (the ``otel`` extra).

    Example:
        >>> app = create_app(source, ["churn@production"])  # doctest: +SKIP
        >>> uvicorn.run(app, host="127.0.0.1", port=8000)  # doctest: +SKIP
    """
    require("starlette", "serve", "serving models")
    require("prometheus_client", "serve", "serving models")
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    from reprise.serve._feedback import feedback_spec
    from reprise.serve._hot import HotPath

    state = ServerState(source, refs, settings or Settings())
    if tracer_provider is not None or state.settings.otel:
        from reprise.serve._tracing import Tracing, tracer_provider_from_env

        state.tracing = Tracing(tracer_provider) if tracer_provider is not None else \
            Tracing(tracer_provider_from_env(), owned=True)
    specs = [*_health_routes(state), *_oip_routes(state), _Spec(*feedback_spec(state))]
    docs = _Docs(specs)
    routes = [Route(s.path, s.endpoint, methods=[s.method]) for s in specs]
    routes += [Route(_OPENAPI_URL, docs.openapi, methods=["GET"], include_in_schema=False),
               Route(_DOCS_URL, docs.swagger, methods=["GET"], include_in_schema=False),
               Route(_OAUTH2_URL, docs.oauth2_redirect, methods=["GET"],
                     include_in_schema=False)]
    for route in routes:  # the method named only (Starlette adds HEAD to GET; FastAPI not)
        assert route.methods is not None
        route.methods.discard("HEAD")
    app = Starlette(routes=routes, lifespan=state.lifespan,
                    exception_handlers={HTTPException: _http_error})
    app.state.reprise = state
    app.add_middleware(HotPath, state=state)
    if state.settings.allowed_origins:  # outermost: answers CORS preflights itself
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(state.settings.allowed_origins),
                           allow_methods=["GET", "POST"], max_age=600,
                           allow_headers=["authorization", "content-type",
                                          "inference-header-content-length",
                                          *([state.settings.key_header]
                                            if state.settings.key_header else [])],
                           expose_headers=["x-reprise-model-version", "x-request-id"])
    return app


def _json(payload: Any, status: int = 200) -> Response:
    from starlette.responses import Response

    return Response(dumps(payload), status_code=status, media_type="application/json")


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths (404) and wrong methods (405) answer with the server's own error
    body, ``{"error": ...}``, which OIP clients read, instead of ``{"detail": ...}``."""
    from starlette.exceptions import HTTPException
    from starlette.responses import Response

    assert isinstance(exc, HTTPException)
    where = f"{request.method} {request.url.path[:200]}"
    if exc.status_code == 404:
        message = f"no endpoint {where}; the endpoints are listed at /docs"
    elif exc.status_code == 405:
        allowed = {k.lower(): v for k, v in (exc.headers or {}).items()}.get(
            "allow", "another method")
        message = f"method not allowed: {where}; use {allowed}"
    else:
        message = str(exc.detail)
    return Response(dumps({"error": message}), status_code=exc.status_code,
                    headers=exc.headers, media_type="application/json")


class _Docs:
    """``/openapi.json`` and ``/docs``: the document is built by FastAPI from the route
    descriptions (plus the hot path's own entries) on the first request, off the event
    loop, and kept."""

    def __init__(self, specs: list[_Spec]) -> None:
        self.specs = specs
        self._schema: dict[str, Any] | None = None
        self._lock = asyncio.Lock()

    async def schema(self) -> dict[str, Any]:
        async with self._lock:
            if self._schema is None:
                self._schema = await asyncio.to_thread(_openapi, self.specs)
        return self._schema

    async def openapi(self, request: Request) -> Response:
        schema = dict(await self.schema())
        root = request.scope.get("root_path", "").rstrip("/")
        if root:  # as FastAPI says where the API is served behind a proxy
            schema["servers"] = [{"url": root}, *schema.get("servers", [])]
        return _json(schema)

    async def swagger(self, request: Request) -> Response:
        from fastapi.openapi.docs import get_swagger_ui_html

        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(openapi_url=root + _OPENAPI_URL,
                                   title=f"{_TITLE} - Swagger UI",
                                   oauth2_redirect_url=root + _OAUTH2_URL)

    async def oauth2_redirect(self, request: Request) -> Response:
        from fastapi.openapi.docs import get_swagger_ui_oauth2_redirect_html

        return get_swagger_ui_oauth2_redirect_html()


def _openapi(specs: list[_Spec]) -> dict[str, Any]:
    """The OpenAPI document of ``specs`` and of the prediction endpoints (``_openapi.py``):
    FastAPI documents a stand-in of each route, whose parameters are its path's."""
    require("fastapi", "serve", "the API documentation")
    from fastapi import FastAPI

    from reprise import __version__
    from reprise.serve._openapi import hot_paths

    doc = FastAPI(title=_TITLE, version=__version__, redoc_url=None)
    for spec in specs:
        params = [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    annotation=str)
                  for p in _path_params(spec.path)]

        def stand_in(**kwargs: Any) -> Any:  # pragma: no cover - never called
            raise NotImplementedError

        stand_in.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            params, return_annotation=Any)
        doc.add_api_route(spec.path, stand_in, methods=[spec.method], tags=list(spec.tags),
                          summary=spec.summary, openapi_extra=spec.openapi_extra,
                          name=spec.endpoint.__name__)
    schema = doc.openapi()
    schema["paths"] = {**hot_paths(), **schema.get("paths", {})}
    return schema


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def _health_routes(state: ServerState) -> list[_Spec]:
    async def healthz(request: Request) -> Response:
        return _json({"status": "alive"})

    async def readyz(request: Request) -> Response:
        body: dict[str, Any] = {"ready": state.ready, "models": state.table.describe()}
        if state.failed:
            body["error"] = state.failed
        return _json(body, 200 if state.ready else 503)

    async def metrics(request: Request) -> Response:
        from starlette.responses import Response

        data, content_type = state.metrics.render()
        return Response(data, media_type=content_type)

    async def list_models(request: Request) -> Response:
        return _json({"models": state.table.describe()})

    return [_Spec("/healthz", "GET", healthz, ["health"], "Alive (the process answers)"),
            _Spec("/readyz", "GET", readyz, ["health"],
                  "Ready: every model loaded and warmed up"),
            _Spec("/metrics", "GET", metrics, ["health"], "Prometheus metrics"),
            _Spec("/v1/models", "GET", list_models, ["v1"],
                  "The models served and their versions")]


def _oip_routes(state: ServerState) -> list[_Spec]:
    tags = ["Open Inference Protocol"]

    async def server_metadata(request: Request) -> Response:
        from reprise import __version__

        return _json({"name": "reprise", "version": __version__,
                      "extensions": list(EXTENSIONS)})

    async def live(request: Request) -> Response:
        return _json({"live": True})

    async def ready(request: Request) -> Response:
        return _json({"ready": state.ready}, 200 if state.ready else 400)

    async def get_model(request: Request) -> Response:
        return _metadata(state, request.path_params["name"], None)

    async def get_model_version(request: Request) -> Response:
        p = request.path_params
        return _metadata(state, p["name"], p["version"])

    async def get_model_ready(request: Request) -> Response:
        return _model_ready(state, request.path_params["name"], None)

    async def get_model_version_ready(request: Request) -> Response:
        p = request.path_params
        return _model_ready(state, p["name"], p["version"])

    return [_Spec("/v2", "GET", server_metadata, tags, "Server metadata"),
            _Spec("/v2/health/live", "GET", live, tags, "Server live"),
            _Spec("/v2/health/ready", "GET", ready, tags, "Server ready (4xx: not ready)"),
            _Spec("/v2/models/{name}", "GET", get_model, tags, "Model metadata"),
            _Spec("/v2/models/{name}/versions/{version}", "GET", get_model_version, tags,
                  "Model version metadata"),
            _Spec("/v2/models/{name}/ready", "GET", get_model_ready, tags,
                  "Model ready (4xx: not ready)"),
            _Spec("/v2/models/{name}/versions/{version}/ready", "GET",
                  get_model_version_ready, tags, "Model version ready (4xx: not ready)")]


def _metadata(state: ServerState, name: str, version: str | None) -> Response:
    try:
        model = state.table.lookup(name, version)
    except HTTPError as exc:
        return _json(exc.body(oip=True), exc.status)
    return _json(model_metadata(model, sorted(state.table.versions[model.name])))


def _model_ready(state: ServerState, name: str, version: str | None) -> Response:
    """200 when ready, 400 while loading (the protocol: 4xx means not ready), 404 when the
    model or version is not served, 400 with an error for a name against the rule."""
    try:
        state.table.lookup(name, version)
    except HTTPError as exc:
        if exc.kind != "loading":  # not served (404), or a name against the rule (400)
            return _json(exc.body(oip=True), exc.status)
        return _json({"name": name, "ready": False}, 400)
    return _json({"name": name, "ready": not state.stopping}, 200)
