"""reprise.train._rank runs a script as ``python SCRIPT ARGS`` would (argv, sys.path,
``__main__``, exit status, traceback, atexit) and leaves with os._exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _rank(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    (tmp_path / "helper_mod.py").write_text("VALUE = 41\n")
    return subprocess.run([sys.executable, "-m", "reprise.train._rank", str(script), *args],
                          capture_output=True, text=True, timeout=60, cwd="/")


def test_a_script_runs_as_main_with_its_argv_path_and_atexit(tmp_path: Path) -> None:
    res = _rank(tmp_path, """
        import atexit, sys
        import helper_mod  # from the script's folder, as `python job.py` finds it
        atexit.register(lambda: print("atexit ran", flush=True))
        if __name__ == "__main__":
            print(sys.argv[1:], helper_mod.VALUE + 1, flush=True)
        """, "--n", "5")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["['--n', '5'] 42", "atexit ran"]


@pytest.mark.parametrize(("body", "code", "err"), [
    ("import sys; sys.exit(3)", 3, ""),
    ("raise SystemExit('bad input')", 1, "bad input"),
    ("raise SystemExit()", 0, ""),
    ("raise ValueError('boom')", 1, "ValueError: boom"),
])
def test_exit_status_and_traceback_as_the_interpreter_gives(
        tmp_path: Path, body: str, code: int, err: str) -> None:
    res = _rank(tmp_path, body)
    assert res.returncode == code and err in res.stderr


def test_without_a_script_it_says_how_to_call_it() -> None:
    res = subprocess.run([sys.executable, "-m", "reprise.train._rank"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "usage" in res.stderr
