"""``reprise verify`` on projects laid out as packages: a package that re-exports its
functions from ``__init__``, nested packages with relative imports run as
``package.module:PIPELINE``, and a ``src/`` layout. The replay must import the
snapshot exactly as the run imported the project, and only the snapshot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

STEP_BODY = '''
@step
def compute(n: int) -> dict:
    return {"v": REF(n), "w": scale(n)}
'''

PIPELINE = '''
@reprise.pipeline
def demo(n: int = 3):
    return compute(n)
'''


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def cli(root: Path, *args: str, pythonpath: str = "") -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    res = subprocess.run([sys.executable, "-m", "reprise.cli", *args, "--json"], cwd=root,
                         env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode in (0, 1), res.stderr
    return dict(json.loads(res.stdout))


def run_and_verify(root: Path, ref: str, pythonpath: str = "") -> dict[str, Any]:
    subprocess.run([sys.executable, "-m", "reprise.cli", "init", "."], cwd=root, check=True,
                   capture_output=True)
    run = cli(root, "run", ref, pythonpath=pythonpath)
    assert run["executed"] == ["compute"], run
    return run


def assert_verified(root: Path, run_id: str, pythonpath: str = "") -> None:
    report = cli(root, "verify", run_id, pythonpath=pythonpath)
    assert report["ok"], report
    assert [(s["step"], s["status"]) for s in report["steps"]] == [("compute", "identical")]


def test_verify_a_package_that_re_exports_its_functions(tmp_path: Path) -> None:
    write(tmp_path, {
        "flow.py": "import reprise\nfrom reprise import step\nimport pkg\nfrom pkg import scale\n"
                   + STEP_BODY.replace("REF", "pkg.f") + PIPELINE,
        "pkg/__init__.py": "from .core import f\nfrom .sub import scale\n",
        "pkg/core.py": "def f(x):\n    return x + 1\n",
        "pkg/sub/__init__.py": "from .deep import scale\n",
        "pkg/sub/deep.py": "def scale(x):\n    return x * 2\n",
    })
    run = run_and_verify(tmp_path, "flow.py:demo")
    assert_verified(tmp_path, run["run_id"])


def test_verify_nested_packages_run_as_a_module(tmp_path: Path) -> None:
    write(tmp_path, {
        "app/__init__.py": "",
        "app/pipeline.py": "import reprise\nfrom .steps import compute\n" + PIPELINE,
        "app/steps/__init__.py": "from .train import compute\n",
        "app/steps/train.py": "from reprise import step\nfrom .. import lib\n"
                              "from ..lib.maths import scale\n"
                              + STEP_BODY.replace("REF", "lib.f"),
        "app/lib/__init__.py": "from .core import f\n",
        "app/lib/core.py": "def f(x):\n    return x + 1\n",
        "app/lib/maths/__init__.py": "from .ops import scale\n",
        "app/lib/maths/ops.py": "def scale(x):\n    return x * 2\n",
    })
    run = run_and_verify(tmp_path, "app.pipeline:demo")
    assert_verified(tmp_path, run["run_id"])


def test_verify_a_src_layout_replays_the_snapshot_not_the_edited_files(tmp_path: Path) -> None:
    write(tmp_path, {
        "src/app/__init__.py": "",
        "src/app/pipeline.py": "import reprise\nfrom reprise import step\nfrom app import lib\n"
                               "from app.lib import scale\n"
                               + STEP_BODY.replace("REF", "lib.f") + PIPELINE,
        "src/app/lib/__init__.py": "from .core import f, scale\n",
        "src/app/lib/core.py": "def f(x):\n    return x + 1\n\n\ndef scale(x):\n"
                               "    return x * 2\n",
    })
    src = str(tmp_path / "src")
    run = run_and_verify(tmp_path, "app.pipeline:demo", pythonpath=src)
    core = tmp_path / "src/app/lib/core.py"
    core.write_text(core.read_text().replace("x + 1", "x + 5"))
    assert cli(tmp_path, "run", "app.pipeline:demo", pythonpath=src)["executed"] == ["compute"]
    # the replay imports the run's code even though src/ is still on PYTHONPATH
    assert_verified(tmp_path, run["run_id"], pythonpath=src)
