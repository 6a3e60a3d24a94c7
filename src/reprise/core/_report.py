"""Intermediate results: how training and cross-validation talk to a tuning trial.

The Trainer (``reprise.train``) and cross-validation (``reprise.evaluate``) do not
know about tuning (``reprise.tune``), and must not import it: they are siblings
in one layer. They call :func:`report` with their intermediate metrics; when the
code runs inside a tuning trial, the trial's :class:`Reporter` records the value
it monitors and, when the pruner says so, :func:`report` raises
:class:`TrialPruned`. Outside a trial :func:`report` does nothing and costs one
attribute lookup.

A trial runs either in this process (the tuner installs its reporter with
:func:`reporting_to`) or in another one: a pipeline step executed by a worker
process, a training script. There the reporter is rebuilt from the environment
variable ``REPRISE_TRIAL``, a JSON object whose ``"factory"`` names a
``module:function`` that takes the object and returns the reporter (the same
way pipeline workers rebuild workspace inputs), so this module never imports
the tuner.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from reprise.core.errors import TrialPruned, UserError

__all__ = ["TRIAL_ENV", "Reporter", "TrialPruned", "current_reporter", "report",
           "reporting_to"]

TRIAL_ENV = "REPRISE_TRIAL"


@runtime_checkable
class Reporter(Protocol):
    """What a tuning trial offers to the code it runs.

    ``report`` receives every intermediate result (a mapping of metric names
    to values, or one number) with a step: an optimizer step, an epoch, a fold.
    The reporter picks the metric it monitors and ignores the rest.
    ``should_prune`` says whether the trial should stop now. Both are called
    from the thread running the trial; they may do I/O (a storage write).
    """

    def report(self, values: Mapping[str, float] | float, step: int) -> None: ...

    def should_prune(self) -> bool: ...


_installed: list[Reporter] = []
_from_env: tuple[str, Reporter | None] | None = None  # (env value, reporter built from it)


def current_reporter() -> Reporter | None:
    """The reporter of the trial this code runs in, or None outside a trial."""
    if _installed:
        return _installed[-1]
    raw = os.environ.get(TRIAL_ENV)
    if not raw:
        return None
    global _from_env
    if _from_env is None or _from_env[0] != raw:
        _from_env = (raw, _build(raw))
    return _from_env[1]


def _build(raw: str) -> Reporter | None:
    try:
        spec = json.loads(raw)
        module, _, name = str(spec["factory"]).partition(":")
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ValueError, KeyError, TypeError, ImportError, AttributeError) as exc:
        raise UserError(f"{TRIAL_ENV} is set but does not describe a tuning trial ({exc}); "
                        f"unset it, or run the code through `reprise tune`.") from None
    reporter = obj(spec)
    return reporter if isinstance(reporter, Reporter) else None


@contextlib.contextmanager
def reporting_to(reporter: Reporter) -> Iterator[Reporter]:
    """Install ``reporter`` for the code run inside the block (in this process)."""
    _installed.append(reporter)
    try:
        yield reporter
    finally:
        _installed.remove(reporter)


def report(values: Mapping[str, float] | float, step: int) -> None:
    """Report an intermediate result to the enclosing trial; raise :class:`TrialPruned`
    when the trial should stop. Does nothing outside a trial.

    Example:
        >>> report({"val_loss": 0.3}, step=1)   # outside a trial: nothing happens
    """
    reporter = current_reporter()
    if reporter is None:
        return
    reporter.report(values, step)
    if reporter.should_prune():
        raise TrialPruned(f"trial pruned at step {step}: its intermediate value is worse "
                          "than the pruner's threshold")
