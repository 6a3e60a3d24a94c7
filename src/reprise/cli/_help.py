"""``reprise --help``, pre-rendered: Typer (with click and pydantic behind it) takes
longer to import than the rest of the command, so ``reprise.cli.main`` prints this
copy of the top-level help when it is asked for on a terminal at least 80 columns
wide (click renders at most 80 columns, so the text is the same on every such
terminal). Anything else (a narrower terminal, a command's ``--help``) goes to
Typer. A test checks that this copy equals Typer's rendering; when it fails after
a command was added or its help changed, paste the new text it shows here.
"""

from __future__ import annotations

import os
import shutil
import sys

__all__ = ["BODY", "program_name", "render", "wants_top_help"]

BODY = """
  Reproducible, cached, traceable ML pipelines. Start with `reprise init`.

Options:
  --version  Print the version and exit.
  --help     Show this message and exit.

Commands:
  serve    Serve registered models: Reprise's JSON API, the Open...
  ui       Serve the dashboard of this workspace: runs, compare, run,...
  predict  Predict every row of INPUT with MODEL into OUTPUT, streaming...
  init     Create a workspace (.reprise/ with database, artifact folder,...
  fsck     Find missing or corrupted blobs in the artifact store.
  gc       Remove blobs that nothing references.
  run      Run a pipeline: unchanged steps are reused from the cache.
  train    Run a training script, on N processes with DDP, on one machine...
  verify   Re-execute a run with the cache off and prove its outputs...
  lineage  Show where outputs came from: steps, inputs, down to the raw...
  report   Write the HTML evaluation report of a run (or of one of its...
  runs     List, show and compare runs.
  env      Show and compare environment fingerprints.
  data     Versioned, validated datasets: add, list, show, diff, schema.
  tune     Hyperparameter search on Optuna: `reprise tune...
  models   Registered models: versions, aliases, promotion, rollback.
  audit    The hash-chained audit log: registry changes, rollout decisions.
  rollout  Deployments: canary, shadow and blue-green rollouts with...
  monitor  Monitoring: drift statistics, the request log, feedback.
  export   Export a registered model: a Docker build context, Kubernetes...
"""


def render(prog: str) -> str:
    """The top-level help as Typer prints it when the program is called ``prog``."""
    return f"Usage: {prog} [OPTIONS] COMMAND [ARGS]...\n{BODY}"


def wants_top_help(args: list[str]) -> bool:
    """Whether ``args`` ask for the top-level help, on a terminal wide enough that the
    pre-rendered text is what Typer would print."""
    return args == ["--help"] and shutil.get_terminal_size().columns >= 80


def program_name() -> str:
    """The program name as click shows it (``reprise``, or ``python -m reprise.cli``)."""
    main = sys.modules.get("__main__")
    path = sys.argv[0] if sys.argv and sys.argv[0] else "reprise"
    package = getattr(main, "__package__", None)
    if not package:
        return os.path.basename(path)
    name = os.path.splitext(os.path.basename(path))[0]
    module = package if name == "__main__" else f"{package}.{name}"
    return f"python -m {module.lstrip('.')}"
