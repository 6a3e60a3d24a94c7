"""The dashboard: a FastAPI app over a workspace. Its JSON API (``/api/...``, one module per
part: ``_api_*.py``, each a ``router(ctx)``) is thin: every answer comes from the layers
below (``reprise.tracking``, the registry, the store's read methods); its pages
(``_pages.py``) are static files whose scripts are the API's first client."""

from __future__ import annotations

import hmac
import os
from importlib import import_module
from typing import TYPE_CHECKING, Any

from reprise.core.errors import NotFoundError, UserError
from reprise.ui._context import UiContext
from reprise.ui._errors import Forbidden

if TYPE_CHECKING:
    from fastapi import FastAPI

    from reprise.store._workspace import Workspace

__all__ = ["API_MODULES", "TOKEN_ENV", "create_app"]

TOKEN_ENV = "REPRISE_UI_TOKEN"
# the API's parts, in the order their routes are matched (reprise.ui._api_NAME.router)
API_MODULES = ("_api_runs", "_api_runs_extra", "_api_compare", "_api_artifacts", "_api_run_more",
               "_api_lineage", "_api_datasets", "_api_studies", "_api_models", "_api_rollouts",
               "_api_monitoring", "_api_tradeoffs")
# what --allow-actions allows (POST /api/models/NAME/promote, /rollback, /rollouts/abort)
ACTIONS = ("promote", "rollback", "abort_rollout")


def create_app(workspace: Workspace, token: str | None = None,
               allow_actions: bool = False) -> FastAPI:
    """The dashboard app over ``workspace``. With ``token`` (else ``REPRISE_UI_TOKEN``;
    empty: none) every ``/api`` request needs ``Authorization: Bearer TOKEN`` (401).
    Without ``allow_actions`` the actions (promote, rollback, abort a rollout) answer 403.

    Example:
        >>> from fastapi.testclient import TestClient  # doctest: +SKIP
        >>> TestClient(create_app(open_workspace())).get("/api/health").json()  # doctest: +SKIP
        {'status': 'ok', ...}
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    secret = token if token is not None else os.environ.get(TOKEN_ENV, "")
    expected = f"Bearer {secret}".encode() if secret else None
    ctx = UiContext(workspace, allow_actions=allow_actions)
    # no /docs or /redoc: FastAPI's pages load Swagger/ReDoc from a CDN, and the dashboard
    # fetches nothing at run time; the schema itself is at /openapi.json
    app = FastAPI(title="Reprise dashboard API", version="1", docs_url=None, redoc_url=None,
                  description="Runs, their metrics and steps, read from a Reprise workspace.")

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Response:
        if expected is not None and request.url.path.startswith("/api"):
            given = request.headers.get("authorization", "").encode()
            # compare_digest: the time taken does not reveal how much of the token matched
            if not hmac.compare_digest(given, expected):
                return JSONResponse({"detail": "a bearer token is required "
                                     "(Authorization: Bearer TOKEN)."}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
        response: Response = await call_next(request)
        return response

    @app.exception_handler(NotFoundError)
    async def _not_found(request: Request, exc: NotFoundError) -> Response:
        return JSONResponse({"detail": str(exc).strip("'\"")}, status_code=404)

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, exc: Forbidden) -> Response:
        return JSONResponse({"detail": str(exc).strip("'\"")}, status_code=403)

    @app.exception_handler(UserError)
    async def _bad(request: Request, exc: UserError) -> Response:
        return JSONResponse({"detail": str(exc).strip("'\"")}, status_code=400)

    @app.get("/api/health", summary="Liveness and the server's mode")
    def health() -> dict[str, Any]:
        return {"status": "ok", "workspace": str(workspace.root),
                "read_only": not allow_actions,
                "actions": list(ACTIONS) if allow_actions else []}

    for module in API_MODULES:
        app.include_router(import_module(f"reprise.ui.{module}").router(ctx))
    from reprise.ui._pages import router as pages

    app.include_router(pages())
    return app
