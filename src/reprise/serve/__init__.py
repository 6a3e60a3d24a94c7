"""Layer 6: serving — an HTTP server for registered models.

``create_app(source, ["churn@production"])`` is a FastAPI app with Reprise's JSON API
(``/v1/models/NAME/predict``), the Open Inference Protocol (KServe V2) REST endpoints,
health probes and Prometheus metrics; requests are validated against the model's
signature and gathered into micro-batches; aliases are followed and versions swapped
without dropping requests. ``run_server`` runs it with uvicorn (``reprise serve``).

Nothing heavy is imported here: FastAPI, uvicorn, prometheus-client and numpy load when
a server is created.

Example:
    >>> from reprise.serve import Settings
    >>> Settings(max_batch_size=32).max_wait_ms
    2.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprise.core._lazy import lazy_attributes
from reprise.serve._settings import TOKEN_ENV, ModelSettings, Settings

__all__ = ["TOKEN_ENV", "ModelSettings", "Settings", "create_app", "run_server"]

_LAZY = {"create_app": "reprise.serve._app", "run_server": "reprise.serve._run"}

if TYPE_CHECKING:
    from reprise.serve._app import create_app
    from reprise.serve._run import run_server


__getattr__ = lazy_attributes(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
