"""A model package is a function of its inputs: its requirements lock lists what the model's
own code paths import, machine facts stay on the run. Installing an unrelated distribution
leaves ``reprise verify`` green; upgrading one the model imports makes it fail and say so,
and makes a cached package a miss.

"Installing" is simulated without touching the shared virtualenv: a ``.dist-info`` folder
with a METADATA file on ``PYTHONPATH`` is an installed distribution to importlib.metadata,
and one put ahead of site-packages shadows the real one's version.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pandas as pd
import pytest

from reprise.registry import package_model
from tests.registry.test_cli import make_project


def fake_distribution(where: Path, name: str, version: str, top: str) -> Path:
    info = where / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{top}\n")
    return where


def reprise_cli(root: Path, *args: str, extra_path: Path | None = None
                ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(extra_path), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=240)


def test_the_lock_holds_the_models_distributions_and_no_machine_facts() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    x = pd.DataFrame({"a": [0.0, 1.0, 2.0, 3.0], "b": [1.0, 0.0, 1.0, 0.0]})
    prep = StandardScaler().fit(x)
    pkg = package_model(LogisticRegression().fit(prep.transform(x), [0, 0, 1, 1]), sample=x,
                        preprocessing=prep)
    names = {r.partition("==")[0] for r in pkg.requirements}
    assert {"scikit-learn", "numpy", "reprise-ml"} <= names
    assert not names & {"typer", "rich", "sqlalchemy", "fastapi"}  # installed, not used
    assert pkg.environment == {"python": "%d.%d" % sys.version_info[:2]}


def test_the_lock_follows_classes_nested_in_the_model() -> None:
    from scipy.stats import zscore
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LinearRegression
    from sklearn.preprocessing import FunctionTransformer

    x = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0]})
    prep = ColumnTransformer([("squash", FunctionTransformer(zscore), ["a"])]).fit(x)
    pkg = package_model(LinearRegression().fit(prep.transform(x), [1.0, 2.0, 3.0, 4.0]),
                        sample=x, preprocessing=prep)
    names = {r.partition("==")[0] for r in pkg.requirements}
    assert {"numpy", "scikit-learn", "scipy"} <= names  # scipy: the function inside


@pytest.mark.slow
def test_verify_ignores_unrelated_installs_and_names_an_upgraded_model_dependency(
        tmp_path: Path) -> None:
    project = make_project(tmp_path)
    run = reprise_cli(project, "run", "flow.py:flow", "--json")
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout)["run_id"]

    unrelated = fake_distribution(tmp_path / "unrelated", "reprise-unrelated-probe", "1.0",
                                  "reprise_unrelated_probe")
    same = reprise_cli(project, "verify", run_id, extra_path=unrelated)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "reprise-unrelated-probe" in same.stdout  # the run's environment diff still shows it

    upgraded = fake_distribution(tmp_path / "upgraded", "scikit-learn", "99.0", "sklearn")
    # the package step's own code never imports sklearn, so only the requirement its
    # package declared makes the cached package a miss after the upgrade
    again = reprise_cli(project, "run", "flow.py:flow", "--json", extra_path=upgraded)
    assert again.returncode == 0, again.stderr
    # fit re-executes (sklearn is in its scope) and gives the same model bytes
    assert json.loads(again.stdout)["executed"] == ["fit", "package"]

    differs = reprise_cli(project, "verify", run_id, extra_path=upgraded)
    assert differs.returncode == 1, differs.stdout + differs.stderr
    table, _, said = differs.stdout.partition("step package: its environment scope changed:")
    assert re.search(r"package +differs +output: DIFFERS", table), differs.stdout
    installed = metadata.version("scikit-learn")
    assert f"scikit-learn {installed} -> 99.0" in " ".join(said.split()), differs.stdout
