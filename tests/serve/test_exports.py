"""The public surface of ``reprise.serve`` is pinned."""

from __future__ import annotations

import reprise.serve


def test_exported_members() -> None:
    assert sorted(reprise.serve.__all__) == [
        "ModelSettings", "Policy", "Settings", "TOKEN_ENV", "abort_rollout", "analyze_once",
        "create_app", "list_rollouts", "load_policy", "promote_rollout", "rollout_status",
        "run_server", "start_rollout"]
    for name in reprise.serve.__all__:
        assert getattr(reprise.serve, name) is not None
