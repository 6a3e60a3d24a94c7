"""``reprise ui``: the dashboard of the current workspace (its pages and its JSON API)."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["ui"]


def ui(
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 exposes the dashboard "
                                           "beyond this machine (set REPRISE_UI_TOKEN).")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    allow_actions: Annotated[bool, typer.Option(
        "--allow-actions", help="Allow the dashboard's actions: promote a model version to an "
        "alias, roll an alias back, abort a running rollout (each audited with the reason "
        "given, actor ui:USER@HOST). Default: read-only.")] = False,
) -> None:
    """Serve the dashboard of this workspace: runs, compare, run, lineage, datasets,
    studies, models and audit log, rollouts, monitoring and trade-offs, in the browser,
    from the JSON API under /api (its OpenAPI schema at /openapi.json). Nothing is
    fetched from the internet. A bearer token is required when REPRISE_UI_TOKEN is set
    (the pages ask for it once per tab). Read-only unless --allow-actions."""
    from reprise.cli._fast import workspace
    from reprise.core.errors import UserError
    from reprise.ui import run_ui

    if port < 0 or port > 65535:
        raise UserError(f"--port must be between 0 and 65535, not {port}.")
    ws = workspace()
    from reprise.cli._drift_check import install_input_drift_check

    install_input_drift_check(ws)  # a rollout page's checks, as `reprise rollout status`'s
    typer.echo(f"Reprise dashboard for {ws.root} on http://{host}:{port}/ (Ctrl-C stops)")
    try:
        run_ui(ws, host=host, port=port, allow_actions=allow_actions)
    finally:
        ws.close()
