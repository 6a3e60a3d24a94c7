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
    monkeypatch.setattr(gc, "get_threshold", lambda: (700, 10, 10))
    monkeypatch.setattr(gc, "set_threshold", lambda *t: calls.append(("threshold", *t)))
    _server._freeze_heap()
    assert calls == [(1,), ("freeze",), ("threshold", 10_000, 10, 10)]


@pytest.mark.parametrize("before", [(0, 10, 10), (50_000, 20, 20)])
def test_a_collector_turned_off_or_already_lazier_is_left_as_it_is(
        monkeypatch: pytest.MonkeyPatch, before: tuple[int, int, int]) -> None:
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    monkeypatch.setattr(gc, "freeze", lambda: None)
    monkeypatch.setattr(gc, "get_threshold", lambda: before)
    monkeypatch.setattr(gc, "set_threshold", lambda *t: calls.append(t))
    _server._freeze_heap()
    assert calls == []
