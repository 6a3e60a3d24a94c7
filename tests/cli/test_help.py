"""The pre-rendered ``reprise --help`` is Typer's help, printed without loading Typer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from reprise.cli import _help


def _typer_help(prog: str, columns: int) -> str:
    code = ("from reprise.cli._app import app\n"
            f"app(['--help'], prog_name={prog!r})")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "COLUMNS": str(columns)})
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("columns", [80, 200])
def test_pre_rendered_help_is_typers(columns: int) -> None:
    assert _help.render("reprise") == _typer_help("reprise", columns), (
        "the commands' help changed: paste Typer's new text into reprise/cli/_help.py BODY")


def test_help_prints_it_without_typer() -> None:
    probe = ("import atexit, json, sys\n"
             "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
             "sys.argv[0] = 'reprise'\n"
             "from reprise.cli import main\nmain(['--help'])")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "COLUMNS": "100"})
    assert res.returncode == 0, res.stderr
    assert res.stdout == _help.render("reprise")
    loaded = {m.split(".")[0] for m in json.loads(res.stderr.strip().splitlines()[-1])}
    assert not loaded & {"typer", "click", "pydantic", "rich", "sqlalchemy"}


def test_narrow_terminals_and_module_runs_get_typers_own_rendering() -> None:
    env = {**os.environ, "COLUMNS": "60"}
    narrow = subprocess.run([sys.executable, "-m", "reprise.cli", "--help"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert narrow.stdout == _typer_help("python -m reprise.cli", 60)
    wide = subprocess.run([sys.executable, "-m", "reprise.cli", "--help"], timeout=60,
                          env={**os.environ, "COLUMNS": "120"}, capture_output=True, text=True)
    assert wide.stdout == _help.render("python -m reprise.cli")
    assert wide.stdout.startswith("Usage: python -m reprise.cli [OPTIONS]")
