"""Studies on a PostgreSQL workspace: Optuna's RDB storage in a schema of its own, shared by
worker processes (and by tuners on other machines), Reprise's own tables untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

import reprise
from reprise.tune import list_studies, tune
from tests.tune import _objectives as obj

pytestmark = pytest.mark.postgres


def test_a_study_lives_in_the_optuna_schema_of_the_workspace_database(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRISE_STORE_URL", pg_url)
    monkeypatch.chdir(tmp_path)
    ws = reprise.init(tmp_path)
    monkeypatch.setenv("REPRISE_TEST_SLEEP", "0.1")
    res = tune(obj.slow_quad, {"x": {"low": -5.0, "high": 5.0}}, n_trials=6, workers=2,
               workspace=ws, pruner=None, study="pg")
    assert res.counts["complete"] == 6
    again = tune(obj.slow_quad, {"x": {"low": -5.0, "high": 5.0}}, n_trials=8, workers=2,
                 workspace=ws, pruner=None, study="pg")  # resumed from the database
    assert again.counts["complete"] == 8
    assert [s["study"] for s in list_studies(ws)] == ["pg"]
    import psycopg

    with psycopg.connect(pg_url) as conn:
        trials = conn.execute("SELECT count(*) FROM optuna.trials").fetchone()
        runs = conn.execute("SELECT count(*) FROM public.runs WHERE kind = 'trial'").fetchone()
        versions = conn.execute("SELECT table_schema FROM information_schema.tables "
                                "WHERE table_name = 'alembic_version' ORDER BY 1").fetchall()
    assert trials == (8,) and runs == (8,)
    assert [v[0] for v in versions] == ["optuna", "public"]  # two migration histories apart
    assert not list(Path(ws.config.workspace_dir).glob("studies/*"))  # no journal file
    ws.close()

