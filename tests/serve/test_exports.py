"""The public surface of ``reprise.serve`` is pinned."""

from __future__ import annotations

import reprise.serve


def test_exported_members() -> None:
    assert sorted(reprise.serve.__all__) == ["ModelSettings", "Settings", "TOKEN_ENV",
                                             "create_app", "run_server"]
    for name in reprise.serve.__all__:
        assert getattr(reprise.serve, name) is not None
