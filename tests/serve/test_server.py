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


@pytest.mark.parametrize(("before", "during"), [
    ((700, 10, 10), (10_000, 10, 10)),
    ((0, 10, 10), (0, 10, 10)),  # the collector turned off: left so
    ((50_000, 20, 20), (50_000, 20, 20)),  # already lazier: left so
])
def test_the_collector_is_lazier_while_run_server_runs_and_restored_after(
        before: tuple[int, int, int], during: tuple[int, int, int]) -> None:
    from reprise.serve._run import _lazy_collector

    saved = gc.get_threshold()
    try:
        gc.set_threshold(*before)
        with pytest.raises(RuntimeError), _lazy_collector():
            assert gc.get_threshold() == during
            raise RuntimeError("the server failed")
        assert gc.get_threshold() == before
    finally:
        gc.set_threshold(*saved)
