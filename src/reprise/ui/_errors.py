"""Errors of the dashboard's API that the store's own errors do not cover."""

from __future__ import annotations

from reprise.core.errors import UserError

__all__ = ["Forbidden"]


class Forbidden(UserError):
    """An action on a read-only dashboard (HTTP 403)."""
