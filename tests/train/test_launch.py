"""``reprise train`` hands the script its arguments exactly as given, on one process and
through torchrun on two: options that look like torchrun's are the script's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ECHO = """\
import json, os, sys
from pathlib import Path
Path(sys.argv[1], "rank" + os.environ.get("RANK", "-") + ".json").write_text(json.dumps(sys.argv[2:]))
"""

# --n abbreviates several torchrun options ("ambiguous option"), --nproc-per-node and
# --master-port spell two exactly, and --help, -- and a space must pass as they are
SCRIPT_ARGS = ["--n", "5", "--nproc-per-node", "7", "--master-port=1", "--", "--help", "a b"]


@pytest.mark.parametrize(("nproc", "ranks"), [(1, ["-"]), (2, ["0", "1"])])
def test_the_script_gets_its_arguments_untouched(tmp_path: Path, nproc: int,
                                                 ranks: list[str]) -> None:
    from tests.pipeline.test_pipelines import cli

    script = tmp_path / "echo.py"
    script.write_text(ECHO)
    out = tmp_path / "out"
    out.mkdir()
    cli(tmp_path, "train", "--nproc", str(nproc), str(script), str(out), *SCRIPT_ARGS)
    assert sorted(p.name for p in out.iterdir()) == [f"rank{r}.json" for r in ranks]
    for r in ranks:
        assert json.loads((out / f"rank{r}.json").read_text()) == SCRIPT_ARGS


def test_resume_allow_data_change_reaches_the_trainer_through_the_environment(
        tmp_path: Path) -> None:
    from tests.pipeline.test_pipelines import cli

    script = tmp_path / "env.py"
    script.write_text("import os, sys\n"
                      "print(repr(os.environ.get('REPRISE_RESUME_ALLOW_DATA_CHANGE')))\n")
    assert cli(tmp_path, "train", str(script)).stdout.strip() == "None"
    allowed = cli(tmp_path, "train", "--resume-allow-data-change", str(script))
    assert allowed.stdout.strip() == "'1'"  # what the Trainer reads (test_trainer.py)
