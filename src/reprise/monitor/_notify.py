"""The notify action: POST the alarm and the action as JSON to a webhook, and log it.

The POST is bounded by the policy's ``notify.timeout`` (at most 60 s), so a slow or dead
receiver delays the loop by that much at most. A failure (refused, timed out, a non-2xx
answer) is returned as a failed outcome, which the loop logs and audits; it never raises
into the loop. URLs are shown without their query string and credentials, where tokens
usually live.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from reprise.monitor._triggers import NotifySettings

__all__ = ["notify", "redact_url"]

log = logging.getLogger("reprise.monitor.loop")


def redact_url(url: str) -> str:
    """``url`` without credentials, query or fragment (``?token=...`` is not logged)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def notify(settings: NotifySettings, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to the webhook; ``{"ok": bool, "status"|"error", "url", "ms"}``."""
    shown = redact_url(settings.url)
    data = json.dumps(body, default=str, allow_nan=False).encode()
    req = urllib.request.Request(settings.url, data=data, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "User-Agent": "reprise-monitor"})
    t0 = time.perf_counter()
    alarm = (body.get("alarm") or {}).get("id")
    log.warning("notify %s: alarm %s", shown, alarm)
    try:
        with urllib.request.urlopen(req, timeout=settings.timeout_s) as resp:  # noqa: S310
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        return _failed(shown, f"the webhook answered HTTP {exc.code}", t0)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return _failed(shown, f"could not reach the webhook: {reason}", t0)
    ms = round((time.perf_counter() - t0) * 1000, 1)
    if not 200 <= status < 300:
        return _failed(shown, f"the webhook answered HTTP {status}", t0)
    return {"ok": True, "url": shown, "status": status, "ms": ms}


def _failed(shown: str, error: str, t0: float) -> dict[str, Any]:
    # the error text of urllib may repeat the URL: keep only the redacted one
    log.error("notify %s failed: %s", shown, error)
    return {"ok": False, "url": shown, "error": error,
            "ms": round((time.perf_counter() - t0) * 1000, 1)}
