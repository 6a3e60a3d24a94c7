"""The server's start-up (reprise.serve._server)."""

from __future__ import annotations

import gc

import pytest

from reprise.serve import _server


def test_freezing_the_heap_skips_the_full_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full collection walks every object the libraries left (0.2-0.5 s on the way to
    ready, for a few dozen objects freed): only the young generations are collected."""
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(gc, "collect", lambda *args: calls.append(args) or 0)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(("freeze",)))
    _server._freeze_heap()
    assert calls == [(1,), ("freeze",)]
