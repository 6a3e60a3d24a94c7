"""``reprise ui``: the dashboard, a thin web app over a JSON API (DESIGN.md layer 7).

This slice holds the JSON API (:func:`create_app`) and the server (:func:`run_ui`); the
pages come later. FastAPI and uvicorn (the ``serve`` extra) load only when called.
"""

from __future__ import annotations

from reprise.ui._app import TOKEN_ENV, create_app
from reprise.ui._run import run_ui

__all__ = ["TOKEN_ENV", "create_app", "run_ui"]
