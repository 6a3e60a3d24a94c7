"""Libraries installed from the user's own source (``pip install -e ./mylib``, or
``pip install ./mylib``) count by their source, not by their version: an edit to them
re-runs the steps that reach the edited code, and ``verify`` replays the run with the
library's code as it was (from the snapshot), not as it is now.

The end-to-end test makes a real virtual environment that sees this interpreter's
packages, installs a small library into it with pip, and runs the CLI with it.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import site
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from reprise.pipeline._fingerprint import code_fingerprint, is_user_module

LIB_CORE = '''
def f(x):
    return x + 1


def unused():
    return 0
'''

FLOW = '''
import reprise
from reprise import step

import mylib


@step
def compute(n: int) -> dict:
    return {"v": mylib.f(n)}


@reprise.pipeline
def demo(n: int = 3):
    return compute(n)
'''


def _fake_install(site_dir: Path, name: str, direct_url: dict[str, Any] | None) -> None:
    """A distribution ``name`` providing module ``name``, installed as pip would."""
    (site_dir / name).mkdir(parents=True)
    (site_dir / name / "__init__.py").write_text("def f(x):\n    return x + 1\n")
    info = site_dir / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n\n")
    (info / "top_level.txt").write_text(name + "\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))


@pytest.mark.parametrize(("direct_url", "users"), [
    ({"url": "file:///home/me/mylib", "dir_info": {"editable": True}}, True),
    ({"url": "file:///home/me/mylib", "dir_info": {}}, True),
    ({"url": "file:///home/me/dist/mylib-1.0-py3-none-any.whl",
      "archive_info": {"hashes": {}}}, True),
    ({"url": "https://files.example.org/mylib-1.0.tar.gz", "archive_info": {}}, False),
    ({"url": "https://github.com/me/mylib", "vcs_info": {"vcs": "git", "commit_id": "ab"}},
     False),
    (None, False),
], ids=["editable", "local-folder", "local-wheel", "index", "vcs", "no-direct-url"])
def test_a_distribution_installed_from_local_source_is_the_users_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_url: dict[str, Any] | None,
        users: bool) -> None:
    name = f"locallib_{uuid.uuid4().hex[:10]}"
    _fake_install(tmp_path / "site", name, direct_url)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(name)
        roots = [tmp_path / "project"]
        assert is_user_module(module, user_roots=roots) is users
        fp = code_fingerprint(module.f, user_roots=roots)
    finally:
        sys.modules.pop(name, None)
    if users:  # by source: its file is snapshotted, no version in the scope
        assert fp.modules == [str(tmp_path / "site" / name / "__init__.py")]
        assert fp.distributions == {}
    else:
        assert fp.distributions == {name.replace("_", "-"): "1.0"}


# -- a real pip install -------------------------------------------------------------------


def _venv(root: Path) -> Path:
    """A virtual environment whose interpreter also sees this one's packages; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    # addsitedir rather than a plain path line: the parent's own .pth files apply too
    Path(purelib, "_parent_site.pth").write_text("".join(
        f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages()))
    return python


def _pip_install(python: Path, lib: Path, *, editable: bool) -> None:
    args = ["-e", str(lib)] if editable else ["--force-reinstall", str(lib)]
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                          "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                          "--disable-pip-version-check", *args],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def _cli(python: Path, root: Path, *args: str) -> dict[str, Any]:
    res = subprocess.run([str(python), "-m", "reprise.cli", *args, "--json"], cwd=root,
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


@pytest.mark.skipif(importlib.util.find_spec("setuptools") is None
                    or importlib.util.find_spec("pip") is None,
                    reason="needs pip and setuptools to install a local library")
@pytest.mark.parametrize("editable", [
    True, pytest.param(False, marks=pytest.mark.slow),  # three wheel builds: ~17 s
], ids=["editable", "local-folder"])
def test_editing_a_locally_installed_library_reruns_the_step_and_verify_replays_the_old_code(
        tmp_path: Path, editable: bool) -> None:
    lib = tmp_path / "mylib"  # beside the project, shared by several: outside its root
    (lib / "src" / "mylib").mkdir(parents=True)
    (lib / "pyproject.toml").write_text(textwrap.dedent('''
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "mylib"
        version = "0.1"
    '''))
    (lib / "src" / "mylib" / "__init__.py").write_text("from .core import f\n")
    core = lib / "src" / "mylib" / "core.py"
    core.write_text(LIB_CORE)
    python = _venv(tmp_path / "venv")
    _pip_install(python, lib, editable=editable)
    project = tmp_path / "project"
    project.mkdir()
    (project / "flow.py").write_text(FLOW)
    subprocess.run([str(python), "-m", "reprise.cli", "init", "."], cwd=project, check=True,
                   capture_output=True)

    def edit(old: str, new: str) -> None:
        core.write_text(core.read_text().replace(old, new))
        if not editable:
            _pip_install(python, lib, editable=False)  # same version, new files

    first = _cli(python, project, "run", "flow.py:demo")
    assert first["executed"] == ["compute"]
    edit("return 0", "return -1")  # code the step does not reach
    assert _cli(python, project, "run", "flow.py:demo")["reused"] == ["compute"]
    edit("x + 1", "x + 2")
    second = _cli(python, project, "run", "flow.py:demo")
    assert second["executed"] == ["compute"]
    assert second["outputs"] != first["outputs"]
    # the first run replays with the library as it was then
    report = _cli(python, project, "verify", first["run_id"])
    assert report["ok"], report
    assert [s["status"] for s in report["steps"]] == ["identical"]
