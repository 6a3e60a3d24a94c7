"""``create_app``: the FastAPI application of a model server."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

from reprise.core import require
from reprise.registry import ModelSource
from reprise.serve._http import HTTPError, dumps
from reprise.serve._oip import EXTENSIONS, model_metadata
from reprise.serve._server import ServerState
from reprise.serve._settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["create_app"]


def create_app(source: ModelSource, refs: list[str], *, settings: Settings | None = None,
               tracer_provider: Any = None) -> FastAPI:
    """A FastAPI app serving ``refs`` (``NAME@ALIAS``, ``NAME:VERSION`` or ``NAME``).

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
    require("fastapi", "serve", "serving models")
    require("prometheus_client", "serve", "serving models")
    from fastapi import FastAPI

    from reprise import __version__
    from reprise.serve._hot import HotPath
    from reprise.serve._openapi import hot_paths

    state = ServerState(source, refs, settings or Settings())
    if tracer_provider is not None or state.settings.otel:
        from reprise.serve._tracing import Tracing, tracer_provider_from_env

        state.tracing = Tracing(tracer_provider) if tracer_provider is not None else \
            Tracing(tracer_provider_from_env(), owned=True)
    app = FastAPI(title="Reprise model server", version=__version__,
                          lifespan=state.lifespan, redoc_url=None)
    app.state.reprise = state
    _error_bodies(app)
    _health_routes(app, state)
    _oip_routes(app, state)
    from reprise.serve._feedback import add_feedback_route

    add_feedback_route(app, state)
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
    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = default_openapi()
            schema["paths"] = {**hot_paths(), **schema.get("paths", {})}
            app.openapi_schema = schema
        return dict(app.openapi_schema)

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _json(payload: Any, status: int = 200) -> Any:
    from fastapi.responses import Response

    return Response(dumps(payload), status_code=status, media_type="application/json")


def _error_bodies(app: FastAPI) -> None:
    """Unknown paths (404) and wrong methods (405) answer with the server's own error
    body, ``{"error": ...}``, which OIP clients read, instead of ``{"detail": ...}``."""
    from starlette.exceptions import HTTPException
    from starlette.requests import Request

    async def http_error(request: Request, exc: Exception) -> Any:
        from fastapi.responses import Response

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

    app.add_exception_handler(HTTPException, http_error)


def _health_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/healthz", tags=["health"], summary="Alive (the process answers)")
    async def healthz() -> Any:
        return _json({"status": "alive"})

    @app.get("/readyz", tags=["health"], summary="Ready: every model loaded and warmed up")
    async def readyz() -> Any:
        body: dict[str, Any] = {"ready": state.ready, "models": state.table.describe()}
        if state.failed:
            body["error"] = state.failed
        return _json(body, 200 if state.ready else 503)

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics")
    async def metrics() -> Any:
        from fastapi.responses import Response

        data, content_type = state.metrics.render()
        return Response(data, media_type=content_type)

    @app.get("/v1/models", tags=["v1"], summary="The models served and their versions")
    async def list_models() -> Any:
        return _json({"models": state.table.describe()})


def _oip_routes(app: FastAPI, state: ServerState) -> None:
    tags: list[str | Enum] = ["Open Inference Protocol"]

    @app.get("/v2", tags=tags, summary="Server metadata")
    async def server_metadata() -> Any:
        from reprise import __version__

        return _json({"name": "reprise", "version": __version__,
                      "extensions": list(EXTENSIONS)})

    @app.get("/v2/health/live", tags=tags, summary="Server live")
    async def live() -> Any:
        return _json({"live": True})

    @app.get("/v2/health/ready", tags=tags, summary="Server ready (4xx: not ready)")
    async def ready() -> Any:
        return _json({"ready": state.ready}, 200 if state.ready else 400)

    @app.get("/v2/models/{name}", tags=tags, summary="Model metadata")
    async def get_model(name: str) -> Any:
        return _metadata(state, name, None)

    @app.get("/v2/models/{name}/versions/{version}", tags=tags,
             summary="Model version metadata")
    async def get_model_version(name: str, version: str) -> Any:
        return _metadata(state, name, version)

    @app.get("/v2/models/{name}/ready", tags=tags, summary="Model ready (4xx: not ready)")
    async def get_model_ready(name: str) -> Any:
        return _model_ready(state, name, None)

    @app.get("/v2/models/{name}/versions/{version}/ready", tags=tags,
             summary="Model version ready (4xx: not ready)")
    async def get_model_version_ready(name: str, version: str) -> Any:
        return _model_ready(state, name, version)


def _metadata(state: ServerState, name: str, version: str | None) -> Any:
    try:
        model = state.table.lookup(name, version)
    except HTTPError as exc:
        return _json(exc.body(oip=True), exc.status)
    return _json(model_metadata(model, sorted(state.table.versions[model.name])))


def _model_ready(state: ServerState, name: str, version: str | None) -> Any:
    """200 when ready, 400 while loading (the protocol: 4xx means not ready), 404 when the
    model or version is not served, 400 with an error for a name against the rule."""
    try:
        state.table.lookup(name, version)
    except HTTPError as exc:
        if exc.kind != "loading":  # not served (404), or a name against the rule (400)
            return _json(exc.body(oip=True), exc.status)
        return _json({"name": name, "ready": False}, 400)
    return _json({"name": name, "ready": not state.stopping}, 200)
