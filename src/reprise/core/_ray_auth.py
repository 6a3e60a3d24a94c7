"""Ray's token authentication, seen from a driver.

Ray (2.5x and later) turns token authentication on for a cluster that ``ray start``
begins on a machine holding a token (``~/.ray/auth_token``, which any local
``ray.init()`` writes the first time, or ``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH``),
but a driver's ``ray.init(address=...)`` sends the token only when ``RAY_AUTH_MODE=token``
is set: without it, the driver is refused ("Authentication token is missing or
incorrect") and retries for minutes. A driver that has a token therefore sets the mode
before Ray is imported, as ``ray start`` does for itself; a cluster without
authentication accepts such a driver too. An explicit ``RAY_AUTH_MODE`` is kept.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["enable_ray_token_auth_if_available"]


def enable_ray_token_auth_if_available() -> bool:
    """Set ``RAY_AUTH_MODE=token`` when unset and this process can read a Ray token;
    whether token mode is on."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None:
        return mode.strip().lower() == "token"
    if os.environ.get("RAY_AUTH_TOKEN"):
        available = True
    else:
        path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
        try:
            available = bool(Path(path).read_text().strip())
        except OSError:
            available = False
    if available:
        os.environ["RAY_AUTH_MODE"] = "token"
    return available
