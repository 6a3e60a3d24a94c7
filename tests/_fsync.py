"""Counting ``os.fsync`` calls: the durability tests of the artifact stores."""

from __future__ import annotations

import os

import pytest


def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, each ``os.fsync`` still syncs and appends its descriptor to the list
    returned."""
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced
