"""Layer 6: serving — an HTTP server for registered models.

``create_app(source, ["churn@production"])`` is an ASGI app (Starlette's) with Reprise's
JSON API (``/v1/models/NAME/predict``), the Open Inference Protocol (KServe V2) REST
endpoints, health probes, Prometheus metrics and the API's documentation (``/docs``);
requests are validated against the model's signature and gathered into micro-batches;
aliases are followed and versions swapped without dropping requests. ``run_server`` runs it
with uvicorn (``reprise serve``).

Rollouts (canary, shadow, blue-green) move an alias to a candidate version under
automatic analysis: ``start_rollout``, ``rollout_status``, ``list_rollouts``,
``promote_rollout``, ``abort_rollout``, and ``analyze_once`` (one decision round).

Nothing heavy is imported here: Starlette, uvicorn, prometheus-client and numpy load when
a server is created; FastAPI only when its API documentation is first asked for.

Example:
    >>> from reprise.serve import Settings
    >>> Settings(max_batch_size=32).max_wait_ms
    2.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprise.core._lazy import lazy_attributes
from reprise.serve._settings import TOKEN_ENV, ModelSettings, Settings

__all__ = ["TOKEN_ENV", "ModelSettings", "Policy", "Settings", "abort_rollout", "analyze_once",
           "create_app", "list_rollouts", "load_policy", "promote_rollout", "rollout_status",
           "run_server", "start_rollout"]

_LAZY = {"create_app": "reprise.serve._app", "run_server": "reprise.serve._run",
         "Policy": "reprise.serve._policy", "load_policy": "reprise.serve._policy",
         **{n: "reprise.serve._rollouts" for n in (
             "abort_rollout", "analyze_once", "list_rollouts", "promote_rollout",
             "rollout_status", "start_rollout")}}

if TYPE_CHECKING:
    from reprise.serve._app import create_app
    from reprise.serve._policy import Policy, load_policy
    from reprise.serve._rollouts import (
        abort_rollout,
        analyze_once,
        list_rollouts,
        promote_rollout,
        rollout_status,
        start_rollout,
    )
    from reprise.serve._run import run_server


__getattr__ = lazy_attributes(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
