"""The HTML report: byte-for-byte deterministic, offline, escaped."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from reprise.core._hashing import canonical_json, hash_bytes
from reprise.evaluate import Evaluation, evaluate, render_report

_SCRIPT = '''
import numpy as np, sys
from reprise.evaluate import evaluate
from reprise.core._hashing import canonical_json, hash_bytes
rng = np.random.default_rng(0)
y = rng.integers(0, 2, 200)
p = np.clip(0.4 * y + 0.6 * rng.random(200), 0, 1)
X = {"age": rng.integers(18, 80, 200), "g": rng.choice(["a", "b"], 200)}
ev = evaluate(y=y, y_proba=p, X=X, slices=["age", "g"], sensitive="g",
              gates={"f1": ">= 0.1"}, bootstrap=100, seed=3)
print(hash_bytes(ev.to_html()))
'''


def _evaluation(binary: dict[str, Any], **kw: Any) -> Evaluation:
    X = {"region": binary["region"], "age": binary["age"]}
    return evaluate(y=binary["y"], y_proba=binary["p"], X=X, slices=["region", "age"],
                    sensitive="region", gates={"f1": ">= 0.1"}, bootstrap=100, **kw)


def test_same_inputs_same_bytes_in_this_and_another_process(binary: dict[str, Any],
                                                            tmp_path: Path) -> None:
    first = _evaluation(binary).to_html()
    assert _evaluation(binary).to_html() == first
    loaded = json.loads(canonical_json(_evaluation(binary)))  # stored: keys sorted
    assert list(loaded["metrics"]) != list(_evaluation(binary)["metrics"])
    assert render_report(loaded) == first
    # a fresh interpreter (another hashing seed, fresh plotly state) renders the same bytes
    script = tmp_path / "render.py"
    script.write_text(_SCRIPT)
    other = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout
    here: dict[str, Any] = {}
    exec(compile(_SCRIPT.replace("print(", "result = ("), "render", "exec"), here)
    assert other.strip() == here["result"]


def test_history_is_part_of_the_report(binary: dict[str, Any]) -> None:
    ev = _evaluation(binary)
    history = {"train/loss": {"step": [0.0, 1.0], "value": [1.0, 0.5]}}
    with_history = ev.to_html(history=history)
    assert with_history != ev.to_html() and b'id="fig-history"' in with_history
    assert with_history == ev.to_html(history=dict(history))


def test_offline_nothing_is_fetched(binary: dict[str, Any]) -> None:
    page = _evaluation(binary).to_html().decode()
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link[^>]*\bhref=", page)
    assert "Plotly.newPlot" in page and len(page) > 1_000_000  # plotly.js is inside


def test_every_section_is_there(binary: dict[str, Any]) -> None:
    page = _evaluation(binary).to_html().decode()
    for title in ("Quality gates", "Metrics", "Per class", "Confusion matrix", "Curves",
                  "Slices", "Worst slice per metric", "Fairness over region"):
        assert f">{title}</h" in page, title
    for div in ("fig-confusion", "fig-roc", "fig-pr", "fig-calibration"):
        assert f'id="{div}"' in page


def test_user_strings_are_escaped() -> None:
    evil = "<script>alert(1)</script>"
    y = np.array([evil, "ok"] * 20)
    X = {evil: np.array(["<b>x</b>", "y"] * 20)}
    page = evaluate(y=y, y_pred=y[::-1], X=X, slices=[evil], positive_label="ok",
                    bootstrap=0).to_html().decode()
    assert evil not in page and "<b>x</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_regression_report(regression: dict[str, Any]) -> None:
    ev = evaluate(y=regression["y"], y_pred=regression["pred"], bootstrap=50)
    page = ev.to_html()
    assert b'id="fig-scatter"' in page and hash_bytes(page) == hash_bytes(ev.to_html())


def test_each_interval_shows_its_method_and_weights_are_said(binary: dict[str, Any]) -> None:
    page = evaluate(y=binary["y"], y_proba=binary["p"], sample_weight=binary["age"],
                    bootstrap=50).to_html().decode()
    assert "<th>interval method</th>" in page
    for method in ("clopper-pearson", "mover-clopper-pearson", "delong-logit+newcombe",
                   "logit+bca", "bootstrap-t", "percentile+consistency"):
        assert f"<td>{method}</td>" in page, method
    assert re.search(r"weighted: total weight [\d.e+]+, [\d.]+ effective rows", page)
