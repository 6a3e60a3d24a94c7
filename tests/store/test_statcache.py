"""The stat cache: bulk lookups below a folder, racily fresh files never trusted, and a
corrupt cache file costs a re-hash, never an error."""

from __future__ import annotations

import os
import time
from pathlib import Path

from reprise.store._statcache import RACY_NS, StatCache, stamp_of


def test_lookup_returns_only_entries_below_the_folder(tmp_path: Path) -> None:
    cache = StatCache(tmp_path / "stat.sqlite")
    now = time.time_ns()
    old = (1, now - 10 * RACY_NS, 2, 3)
    cache.record([("/d/a", old, "a" * 64), ("/d/sub/b", old, "b" * 64), ("/d-other/c", old,
                  "c" * 64), ("/dd/x", old, "d" * 64)], hashed_at_ns=now)
    assert set(cache.lookup("/d")) == {"/d/a", "/d/sub/b"}
    assert cache.lookup("/d/")["/d/a"] == (old, "a" * 64)


def test_racily_fresh_files_are_not_remembered(tmp_path: Path) -> None:
    cache = StatCache(tmp_path / "stat.sqlite")
    f = tmp_path / "f"
    f.write_bytes(b"x")
    stamp = stamp_of(os.lstat(f))
    cache.record([(str(f), stamp, "a" * 64)], hashed_at_ns=stamp[1] + RACY_NS // 2)
    assert cache.lookup(tmp_path) == {}  # modified in the same tick as hashing: not trusted
    cache.record([(str(f), stamp, "a" * 64)], hashed_at_ns=stamp[1] + 2 * RACY_NS)
    assert cache.lookup(tmp_path)[str(f)] == (stamp, "a" * 64)


def test_a_corrupt_cache_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "stat.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    cache = StatCache(path)
    assert cache.lookup(tmp_path) == {}
    cache.record([("/x/y", (1, 0, 2, 3), "a" * 64)], hashed_at_ns=10 * RACY_NS)
    assert cache.lookup("/x") == {"/x/y": ((1, 0, 2, 3), "a" * 64)}
