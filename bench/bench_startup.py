"""Start-up latency: ``reprise --help`` and ``import reprise`` against ``import mlflow``
(and a bare interpreter as the floor), measured as fresh processes, median of N."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from _common import command_time, finish, python


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 2
    py = python()
    script = shutil.which("reprise", path=str(Path(py).parent)) or "reprise"
    cases = {
        "python_floor": [py, "-c", "pass"],
        "reprise_help": [script, "--help"],
        "import_reprise": [py, "-c", "import reprise"],
        "import_mlflow": [py, "-c", "import mlflow"],
    }
    figures: dict[str, float] = {}
    samples: dict[str, list[float]] = {}
    for name, argv_ in cases.items():
        figures[f"{name}_s"], samples[name] = command_time(argv_, args.repeats)
    ratios = {"import_mlflow_vs_reprise_help": figures["import_mlflow_s"]
              / figures["reprise_help_s"]}
    result = {"figures": figures, "ratios": ratios, "samples": samples,
              "repeats": args.repeats, "goal": "reprise --help <= 0.15 s"}
    return finish("startup", result, quick=args.quick, fmt=lambda k, v: f"{v * 1000:>11.0f} ms")


if __name__ == "__main__":
    main()
