"""reprise.log_artifact inside a step: an extra output, cached and reused with the step,
loaded by name, and never mistaken for a declared output."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import reprise
from reprise.core.errors import InvalidNameError

FLOW = '''
import reprise
from reprise import step


@step
def report(n: int) -> dict:
    reprise.log_artifact(("<p>" + "x" * n + "</p>").encode(), "report.html")
    reprise.log_artifact({"n": n}, "summary.json")
    return {"n": n}


@step
def twice(n: int) -> int:
    reprise.log_artifact(b"a", "same")
    reprise.log_artifact(b"b", "same")
    return n


@reprise.pipeline
def flow(n: int = 3):
    return report(n)


@reprise.pipeline
def bad():
    return twice(1)
'''


@pytest.fixture
def flows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    (tmp_path / "artflow.py").write_text(textwrap.dedent(FLOW))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    reprise.init(tmp_path)
    from reprise.pipeline import load_pipeline

    yield load_pipeline("artflow.py:flow"), load_pipeline("artflow.py:bad")
    sys.modules.pop("artflow", None)


def test_logged_artifacts_are_outputs_cached_with_the_step(flows) -> None:  # type: ignore[no-untyped-def]
    flow, _ = flows
    first = flow.run(n=3, workers=1)
    assert first["report"] == {"n": 3}  # the declared output only
    outs = {o["name"]: o for o in first.nodes["report"].outputs}
    assert set(outs) == {"output", "artifacts/report.html", "artifacts/summary.json"}
    from reprise.store._materializers import load_object

    ws = reprise.open_workspace()
    html = outs["artifacts/report.html"]
    assert load_object(ws.artifacts, html["hash"], html["materializer"], html["meta"]) == \
        b"<p>xxx</p>"
    again = flow.run(n=3, workers=1)
    assert again.reused == ["report"]
    assert {o["name"]: o["hash"] for o in again.nodes["report"].outputs} == \
        {k: v["hash"] for k, v in outs.items()}


def test_the_same_artifact_name_twice_fails_the_step(flows) -> None:  # type: ignore[no-untyped-def]
    _, bad = flows
    from reprise.pipeline import StepFailedError

    with pytest.raises(StepFailedError) as info:
        bad.run(workers=1)
    assert "logged artifact 'same' twice" in info.value.error


def test_log_artifact_without_a_name_is_refused() -> None:
    from reprise.pipeline._execute import StepContext

    with pytest.raises(InvalidNameError, match="needs a name"):
        StepContext("s").log_artifact({"a": 1})


def test_seeded_code_leaves_no_torch_import_hook_behind() -> None:
    import subprocess
    import sys

    code = ("import sys\n"
            "from reprise.pipeline._execute import _SeedTorchOnImport, seeded\n"
            "with seeded(3):\n"
            "    assert 'torch' not in sys.modules and _SeedTorchOnImport._armed is not None\n"
            "assert _SeedTorchOnImport._armed is None\n"
            "assert not any(isinstance(f, _SeedTorchOnImport) for f in sys.meta_path)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
