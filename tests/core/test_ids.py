from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reprise.core import new_id, shortest_unique_prefixes


def test_ids_are_unique_and_sortable_by_time() -> None:
    ids = [new_id(now_ms=1_700_000_000_000 + i) for i in range(100)]
    assert ids == sorted(ids)
    assert len({new_id() for _ in range(1000)}) == 1000
    assert all(len(i) == 26 for i in ids)


@given(st.lists(st.integers(min_value=0, max_value=2**40), min_size=1, max_size=30))
def test_short_prefixes_are_unique(times: list[int]) -> None:
    ids = [new_id(now_ms=t) for t in times]
    short = shortest_unique_prefixes(ids)
    for full, prefix in short.items():
        assert full.startswith(prefix)
        assert len(prefix) >= 8
        assert [i for i in ids if i.startswith(prefix)] == [full] * ids.count(full)
