"""``reprise monitor compare`` and ``report`` on two dataset versions."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import reprise
from reprise.cli import main


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    w = reprise.init(tmp_path)
    rng = np.random.default_rng(0)
    n = 4000
    a = pd.DataFrame({"age": rng.normal(40, 10, n).round(), "income": rng.lognormal(10, 1, n),
                      "plan": rng.choice(["basic", "pro", "team"], n, p=[0.6, 0.3, 0.1])})
    a.to_csv(tmp_path / "a.csv", index=False)
    b = a.sample(1500, random_state=1).copy()
    b["income"] *= 1.3
    b.loc[b.index[:200], "plan"] = "enterprise"
    b.loc[b.index[:100], "age"] = None
    b.to_csv(tmp_path / "b.csv", index=False)
    pd.DataFrame({"other": [1, 2, 3]}).to_csv(tmp_path / "c.csv", index=False)
    reprise.add_dataset("churn", tmp_path / "a.csv", workspace=w)
    reprise.add_dataset("churn", tmp_path / "b.csv", workspace=w)
    reprise.add_dataset("misc", tmp_path / "c.csv", workspace=w)
    yield w
    w.close()


def test_compare_table_and_json(ws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "monitor", "compare", "churn@1", "churn@2")
    assert code == 0
    assert "income" in out and "drift in 3 of 3 columns (holm at alpha 0.05)" in out
    code, out, _ = _cli(capsys, "monitor", "compare", "churn@1", "churn@2", "--json",
                        "--correction", "bh")
    doc = json.loads(out)
    assert code == 0 and doc["verdict"] == "drift" and doc["correction"] == "bh"
    assert doc["reference"] == "churn@1" and doc["current"] == "churn@2"
    cols = {c["column"]: c for c in doc["columns"]}
    assert cols["plan"]["unseen"]["labels"] == {"enterprise": 200}
    assert cols["age"]["missing_rate"] == pytest.approx(100 / 1500)
    assert cols["income"]["method"] == "ks" and cols["income"]["significant"]
    code, out, _ = _cli(capsys, "monitor", "compare", "churn@1", "churn@1", "--json")
    assert json.loads(out)["verdict"] == "no_drift"


def test_report_is_offline_html_under_5_mb(ws: Any, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "out" / "drift.html"
    code, out, _ = _cli(capsys, "monitor", "report", "churn@1", "churn@2", "-o", str(out_file))
    assert code == 0 and "drift in 3 of 3 columns" in out
    page = out_file.read_text(encoding="utf-8")
    assert len(page.encode()) <= 5_000_000
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link[^>]*\bhref=", page)
    assert "enterprise" in page and 'id="chart-2"' in page


@pytest.mark.parametrize("args, message", [
    (["churn@1", "nope@1"], "no dataset named 'nope'"),
    (["churn@1", "churn@9"], "has no version 9"),
    (["churn@1", "misc@1"], "no column in common"),
    (["churn@1", "churn@2", "--correction", "bonferroni"], "correction must be"),
    (["churn@1", "churn@2", "--min-rows", "0"], "min_rows must be"),
    (["churn@1", "churn@2", "--policy", "missing.yaml"], "cannot read the drift policy"),
])
def test_bad_input_exits_2_with_a_clear_message(ws: Any, capsys: pytest.CaptureFixture[str],
                                                 args: list[str], message: str) -> None:
    code, _, err = _cli(capsys, "monitor", "compare", *args)
    assert code == 2 and message in err


def test_policy_file(ws: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "policy.yaml").write_text("alpha: 0.01\ncolumns:\n  plan: {ignore: true}\n")
    code, out, _ = _cli(capsys, "monitor", "compare", "churn@1", "churn@2", "--json",
                        "--policy", str(tmp_path / "policy.yaml"))
    doc = json.loads(out)
    assert code == 0 and doc["alpha"] == 0.01
    assert {c["column"]: c["verdict"] for c in doc["columns"]}["plan"] == "ignored"
    (tmp_path / "typo.yaml").write_text("columns:\n  plann: {ignore: true}\n")
    code, _, err = _cli(capsys, "monitor", "compare", "churn@1", "churn@2",
                        "--policy", str(tmp_path / "typo.yaml"))
    assert code == 2 and "['plann'] that churn@1 or churn@2 does not have" in err
    assert "did you mean 'plan'" in err
