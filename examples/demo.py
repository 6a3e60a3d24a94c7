"""The Reprise demo (``make demo``): the tabular pipeline, end to end, on the
embedded SQLite workspace, driven through the CLI as a user would.

1. ``reprise init`` a fresh workspace in examples/tabular;
2. ``reprise run pipeline.py:tabular`` executes every step;
3. the same command again reuses every step from the cache;
4. ``reprise verify`` re-executes the first run with the cache off and proves
   every output identical;
5. ``reprise lineage`` shows where the metrics came from, and ``reprise runs
   show`` the recorded run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "tabular"


def reprise(*args: str, capture: bool = False) -> str:
    cmd = [sys.executable, "-m", "reprise.cli", *args]
    print(f"\n$ reprise {' '.join(args)}", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    res = subprocess.run(cmd, cwd=PROJECT, env=env, text=True,
                         stdout=subprocess.PIPE if capture else None)
    if res.returncode != 0:
        sys.exit(f"demo: `reprise {' '.join(args)}` exited with {res.returncode}")
    return res.stdout or ""


def main() -> None:
    shutil.rmtree(PROJECT / ".reprise", ignore_errors=True)
    reprise("init", ".")
    first = json.loads(reprise("run", "pipeline.py:tabular", "-p", "C=0.5", "--json",
                               capture=True))
    print(f"first run {first['run_id']}: executed {len(first['executed'])} step(s), "
          f"reused {len(first['reused'])}")
    reprise("run", "pipeline.py:tabular", "-p", "C=0.5", "--progress", "lines")
    reprise("verify", first["run_id"])
    reprise("lineage", first["run_id"])
    reprise("runs", "show", first["run_id"])


if __name__ == "__main__":
    main()
