"""Start the dashboard with uvicorn (``reprise ui``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from reprise.core import require
from reprise.core._net import is_loopback_host

if TYPE_CHECKING:
    from reprise.store._workspace import Workspace

__all__ = ["run_ui"]

_logger = logging.getLogger("reprise.ui")
_LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]


def run_ui(workspace: Workspace, *, host: str = "127.0.0.1", port: int = 8080,
           token: str | None = None, allow_actions: bool = False,
           log_level: str = "warning") -> None:
    """Serve the dashboard of ``workspace`` on ``host:port`` until Ctrl-C. Bound to a
    loopback address, only loopback names are accepted in ``Host`` (against DNS
    rebinding); on another address without a token, a warning says anyone can read."""
    uvicorn = require("uvicorn", "serve", "reprise ui")
    require("fastapi", "serve", "reprise ui")
    from fastapi.middleware.trustedhost import TrustedHostMiddleware

    from reprise.ui._app import TOKEN_ENV, create_app

    app = create_app(workspace, token=token, allow_actions=allow_actions)
    if is_loopback_host(host):
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=_LOOPBACK_NAMES)
    else:
        import os

        if not (token or os.environ.get(TOKEN_ENV)):
            _logger.warning("the dashboard listens on %s without a token: anyone who can "
                            "reach it can read this workspace; set %s", host, TOKEN_ENV)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
